"""Verdicts: every term of every response ends in one of four states.

One alpha decides everything. The family is primary responses x primary terms (the spec's
`primary_terms`, by default every main effect and control); each of its m contrasts is
tested at alpha* = alpha / m (Bonferroni; `adjust="none"` gives alpha* = alpha). Other terms
and responses are decided at the same alpha*, outside the family (they do not count in m).
Bonferroni and not Holm: a step-down rule can reject a hypothesis whose own interval at its
printed level still holds zero, and no sentence may contradict the interval printed beside
it. For an estimate e with standard error se and df degrees of freedom, t1 = t_{1-alpha*/2}
and t2 = t_{1-alpha*}:

- matters, beyond the margin: zero is rejected (the (1 - alpha*) interval e +- t1 se excludes
  it) and the one-sided bound at alpha* lies beyond +-margin (e - t2 se > margin, or
  e + t2 se < -margin): the (1 - 2 alpha*) interval lies wholly beyond the margin;
- matters, size unsure: zero is rejected, but the one-sided bound reaches inside the margin
  (with no margin declared, every effect that matters is of unsure size);
- negligible: both one-sided tests against -margin and +margin reject at alpha* (TOST): the
  (1 - 2 alpha*) interval lies inside (-margin, +margin). Where it also excludes zero the
  effect is "detected, smaller than the margin";
- undecided: none of these.

Contrasts come from one OLS per response: the terms the design can estimate (sum coding,
`analysis.anova`), the replicate as an additive block. A two-level term's contrast is the
DOE effect (mean where its coded product is +1 minus mean where it is -1, over cell means).
A factor of more than two levels enters as every pair of its levels (`D1[a->b]`). A control
arm adds one contrast, every factorial arm pooled against it, from the cell-means model of
all arms with the block.

Errors match the design. In a balanced design (every cell in every block, equally often)
the pooled OLS errors are unbiased for the factorial contrasts even where cell variances
differ, since every cell enters each contrast with the same weight. Where the design is
unbalanced (missing runs, or a control arm of a different size), the errors are HC2 with the
Satterthwaite degrees of freedom of Bell & McCaffrey (2002): the df of the scaled
chi-square that matches the HC2 variance's first two moments under homoskedastic errors.

Beside each family term the block-by-term interaction is tested (an F test of the term's
columns times the block's; studentised: the term's effect measured within each block
against the pooled error): a term whose effect differs between blocks is named. Every
verdict says how far its estimate lies from the nearest decision boundary, in standard
errors.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special, stats

from trials.registry import Registry
from trials.workload import registry

from . import power
from .anova import AnalysisError, estimable_terms, model_formula, safe_names
from .design import factorial_rows, levels, with_value
from .frame import SweepRecord
from .effects import default_levels
from .types import (BEYOND, DECISION_POWER, NEGLIGIBLE, UNDECIDED, UNSURE, BlockTest, Contrast, Decision,
                    ResponseCheck, SimpleEffect, Verdict, reps)

ADJUSTMENTS = ("bonferroni", "none")
MAX_BLOCKS = 1000
COUNT_METRICS = {BEYOND: "verdicts/matters_beyond", UNSURE: "verdicts/matters_unsure", NEGLIGIBLE: "verdicts/negligible",
                 UNDECIDED: "verdicts/undecided"}  # the parent run's counts of the family's verdicts
POOLED_FALLBACK = "pooled (HC2 undefined: a cell seen once)"


# ---------------------------------------------------------------- margins

def margins_for(record: SweepRecord, given: dict[str, float] | None = None) -> dict[str, dict]:
    """The primary responses: the spec's (the sweep record's `responses`), with `given`
    (`--margin RESPONSE=VALUE`) supplying or overriding margins. Better directions are the
    registry's (the swept workload's, as the record names it)."""
    rules = registry(record.workload)
    out = {}
    for name, decl in dict(record.responses).items():
        out[name] = {"better": decl.get("better") or rules.better(name), "margin": float(decl["margin"])}
    for name, margin in (given or {}).items():
        if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
            raise AnalysisError(f"--margin {name}: must be a finite number > 0, got {margin!r}")
        out[name] = {"better": rules.better(name), "margin": float(margin)}
    return out


def parse_margins(items: list[str] | None) -> dict[str, float]:
    """`RESPONSE=VALUE` strings (the CLI's repeatable --margin) to a mapping; one line on error."""
    out = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        try:
            margin = float(value)
        except ValueError:
            margin = float("nan")
        if not sep or not name or not (math.isfinite(margin) and margin > 0):
            raise AnalysisError(f"--margin: expected RESPONSE=VALUE with a finite VALUE > 0, got {item!r}")
        out[name] = margin
    return out


# ---------------------------------------------------------------- the model and its contrasts

@dataclass
class Fit:
    """One response's OLS: the fit, its terms, the errors used, the cell-averaged design rows,
    and what HC2's degrees of freedom and the block-by-term test need."""
    result: object  # statsmodels RegressionResults
    terms: list[tuple[str, ...]]
    cov: np.ndarray
    errors: str  # pooled | HC2
    cell_rows: dict[tuple[str, ...], np.ndarray]
    X: np.ndarray
    slices: dict[tuple[str, ...], slice]  # each term's columns in X
    block_cols: np.ndarray | None  # the block's sum-coded columns (n, B - 1)

    def df_of(self, L: np.ndarray) -> float:
        """The degrees of freedom of contrast L: the residual df under pooled errors, Bell
        and McCaffrey's Satterthwaite df under HC2."""
        if self.errors != "HC2":
            return float(self.result.df_resid)
        return bm_df(self.X, L)


def bm_df(X: np.ndarray, L: np.ndarray) -> float:
    """Bell & McCaffrey's (2002) degrees of freedom for HC2's variance of L'b: the
    estimate is a'y with a = X (X'X)^-1 L, HC2's variance sum_i d_i e_i^2 with
    d_i = a_i^2 / (1 - h_ii), and under homoskedastic errors e = (I - H) eps, so the
    variance is eps' M eps with M = (I - H) D (I - H); df = tr(M)^2 / tr(M^2). With H = QQ'
    (X = QR): tr(M) = sum d_i (1 - h_ii), tr(M^2) = sum d_i^2 (1 - 2 h_ii) + ||Q'DQ||_F^2,
    which costs O(n p^2), never an n x n matrix."""
    Q, R = np.linalg.qr(X)
    a = Q @ np.linalg.solve(R.T, L)  # X (X'X)^-1 L = Q R^-T L
    h = (Q ** 2).sum(axis=1)
    d = a ** 2 / np.clip(1 - h, 1e-12, None)
    tr_m = float((d * (1 - h)).sum())
    QDQ = Q.T @ (d[:, None] * Q)
    tr_m2 = float((d ** 2 * (1 - 2 * h)).sum() + (QDQ ** 2).sum())
    return tr_m ** 2 / tr_m2 if tr_m2 > 0 else float("nan")


def is_balanced(data: pd.DataFrame, factors: list[str], block: str | None) -> bool:
    """Every cell in every block, equally often."""
    cols = factors + ([block] if block else [])
    counts = data.groupby([data[c].astype(str) for c in cols], observed=True).size()
    n_cells = data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups
    n_blocks = data[block].nunique() if block else 1
    return counts.nunique() == 1 and len(counts) == n_cells * n_blocks


def fit_response(data: pd.DataFrame, response: str, factors: list[str], block: str | None,
                 errors: str = "auto") -> Fit:
    """OLS of the response on the estimable terms (+ the block). `errors`: "auto" is pooled
    for a balanced design and HC2 otherwise; "pooled" or "HC2" force one."""
    from statsmodels.regression.linear_model import OLS

    terms = estimable_terms(data, factors, None, block)
    if not terms:
        raise AnalysisError(f"{response}: too few runs ({len(data)}) to estimate any term")
    cols = factors + ([block] if block else [])
    design, cell_rows, slices, block_cols = _design(tuple(map(tuple, data[cols].astype(str).to_numpy())),
                                                    tuple(factors), block, tuple(terms))
    y = pd.Series(pd.to_numeric(data[response]).to_numpy(dtype=float), name="y__")
    result = OLS(y, design).fit()
    if result.df_resid < 1:
        raise AnalysisError(f"{response}: no residual degrees of freedom for the terms the design estimates")
    use = errors if errors != "auto" else ("pooled" if is_balanced(data, factors, block) else "HC2")
    cov = np.asarray(result.cov_params())
    if use == "HC2":
        h = np.asarray(result.get_influence().hat_matrix_diag)
        if (h < 1 - 1e-8).all():
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                cov = np.asarray(result.cov_HC2)
        else:  # a run with leverage 1 (a cell seen once) leaves HC2 undefined: the pooled errors
            use = POOLED_FALLBACK
    return Fit(result, terms, cov, use, dict(cell_rows), design.to_numpy(), slices, block_cols)


@functools.lru_cache(maxsize=64)
def _design(rows: tuple[tuple[str, ...], ...], factors: tuple[str, ...], block: str | None,
            terms: tuple[tuple[str, ...], ...]) -> tuple[pd.DataFrame, dict, dict, np.ndarray | None]:
    """The model's design for these runs' levels (one row of factor levels, + the block, per
    run): the design matrix, each cell's design row averaged over the blocks (so that
    contrasts of cells cancel the block), each term's columns and the block's columns. It
    depends on the levels alone, so the responses fitted on the same runs share it."""
    import patsy

    safe = safe_names(list(factors) + ([block] if block else []))
    rdata = pd.DataFrame(list(rows), columns=list(safe.values()))
    rhs = model_formula("y__", list(factors), terms, safe, block).split("~", 1)[1]
    design = patsy.dmatrix(rhs, rdata, return_type="dataframe")
    cells = sorted({r[:len(factors)] for r in rows})
    blocks = sorted({r[-1] for r in rows}) if block else [None]
    grid = pd.DataFrame([{**{safe[f]: c[i] for i, f in enumerate(factors)},
                          **({safe[block]: b} if block else {})} for c in cells for b in blocks])
    X = np.asarray(patsy.build_design_matrices([design.design_info], grid)[0])
    means = X.reshape(len(cells), len(blocks), -1).mean(axis=1)
    by_name = design.design_info.term_name_slices
    slices = {t: by_name[":".join(f"C({safe[f]}, Sum)" for f in t)] for t in terms}
    block_cols = design.to_numpy()[:, by_name[f"C({safe[block]}, Sum)"]] if block else None
    return design, {c: means[i] for i, c in enumerate(cells)}, slices, block_cols


def _pairs(data: pd.DataFrame, factor: str) -> list[tuple[str, str, bool]]:
    """(low, high, pairwise) level pairs of a factor: its one pair in the effects'
    convention for two levels, every pair in the spec's order for more."""
    seen = {str(v) for v in pd.unique(data[factor])}  # unique first: thousands of runs, few levels
    present = [str(v) for v in levels(data, factor) if str(v) in seen]
    if len(present) == 2:
        low, high = default_levels(data, factor)
        return [(str(low), str(high), False)]
    return [(a, b, True) for a, b in itertools.combinations(present, 2)]


def _contrast(fit: Fit, weights: dict, term: str, label: str, group: str) -> Contrast:
    L = sum(w * fit.cell_rows[c] for c, w in weights.items()) / (sum(w > 0 for w in weights.values()) or 1)
    se = float(np.sqrt(max(L @ fit.cov @ L, 0.0)))
    return Contrast(term, label, float(L @ np.asarray(fit.result.params)), se, fit.df_of(L), group)


def term_contrasts(fit: Fit, data: pd.DataFrame, factors: list[str]) -> list[Contrast]:
    """Every estimable term's contrast(s): the estimate, its standard error and df."""
    out = []
    pairs = {f: _pairs(data, f) for f in {f for term in fit.terms for f in term}}
    for term in fit.terms:
        for combo in itertools.product(*(pairs[f] for f in term)):
            weights = {}
            for cell in fit.cell_rows:
                w = 1.0
                for f, (low, high, _) in zip(term, combo):
                    v = cell[factors.index(f)]
                    w *= 1.0 if v == high else -1.0 if v == low else 0.0
                if w:
                    weights[cell] = w
            if not weights:
                continue
            name = ":".join(f"{f}[{lo}->{hi}]" if pw else f for f, (lo, hi, pw) in zip(term, combo))
            label = f"{combo[0][0]} -> {combo[0][1]}" if len(term) == 1 and not combo[0][2] else ""
            out.append(_contrast(fit, weights, name, label, ":".join(term)))
    return out


def setting_label(setting: dict[str, str]) -> str:
    return ", ".join(f"{f}={lv}" for f, lv in setting.items())


def named_contrast(fit: Fit, factors: list[str], name: str, sides: dict[str, dict[str, str]]) -> Contrast | None:
    """A spec's named contrast: the model's mean over the cells at `to` minus its mean over
    the cells at `from` (each side averaged over the other factors' levels, which the spec's
    check made balanced), e.g. the operating point K 7 with decay 7 against K 4 with decay 4.
    None where a side has no cell among these runs."""
    means = []
    for side in ("from", "to"):
        at = [c for c in fit.cell_rows if all(c[factors.index(f)] == lv for f, lv in sides[side].items())]
        if not at:
            return None
        means.append(sum(fit.cell_rows[c] for c in at) / len(at))
    L = means[1] - means[0]
    se = float(np.sqrt(max(L @ fit.cov @ L, 0.0)))
    label = f"{setting_label(sides['from'])} -> {setting_label(sides['to'])}"
    return Contrast(name, label, float(L @ np.asarray(fit.result.params)), se, fit.df_of(L), name)


def simple_effects(fit: Fit, data: pd.DataFrame, factors: list[str], factor: str) -> list[tuple[str, Contrast]]:
    """A main effect at each combination of the other factors' levels: (where, contrast)."""
    out = []
    others = [f for f in factors if f != factor]
    for low, high, pw in _pairs(data, factor):
        name = f"{factor}[{low}->{high}]" if pw else factor
        for at in sorted({tuple(c[factors.index(g)] for g in others) for c in fit.cell_rows}):
            weights = {}
            for cell in fit.cell_rows:
                if tuple(cell[factors.index(g)] for g in others) != at:
                    continue
                v = cell[factors.index(factor)]
                if v in (low, high):
                    weights[cell] = 1.0 if v == high else -1.0
            if len(weights) == 2:
                where = ", ".join(f"{g}={lv}" for g, lv in zip(others, at)) or "everywhere"
                out.append((where, _contrast(fit, weights, name, f"{low} -> {high}", factor)))
    return out


def control_contrast(df: pd.DataFrame, response: str, control: str, block: str | None) -> Contrast:
    """Every factorial arm pooled against the control arm: the mean of the factorial cells'
    means minus the control's, from the cell-means model of every arm with the replicate as
    a block. Errors as for the factorial terms: pooled where every arm (the control too) has
    the same runs in every block; HC2 with Bell-McCaffrey df where not (missing runs, or a
    control arm of a different size), since the arms then enter with weights the pooled
    variance does not average over."""
    from statsmodels.regression.linear_model import OLS

    if control not in set(df["cell"]):
        raise AnalysisError(f"control arm {control!r} not found")
    arm = df["arm"].astype(str) if "arm" in df.columns else pd.Series("factorial", index=df.index)
    keep = (df["cell"] == control) | (arm == "factorial")
    cells = df.loc[keep, "cell"].astype(str)
    if cells.nunique() < 2 or (cells == control).sum() < 2 or keep.sum() < 4:
        raise AnalysisError("control contrast: needs factorial runs and at least 2 control runs")
    names = sorted(set(cells))
    X = (cells.to_numpy()[:, None] == np.array(names)[None, :]).astype(float)  # (n, cells): cell means
    blk = df.loc[keep, block].astype(str) if block and block in df.columns else None
    if blk is not None and blk.nunique() > 1:
        levels_ = sorted(set(blk))
        B = (blk.to_numpy()[:, None] == np.array(levels_)[None, :]).astype(float)
        X = np.column_stack([X, B[:, :-1] - B[:, -1:]])  # sum-coded block
    y = pd.to_numeric(df.loc[keep, response]).to_numpy(float)
    res = OLS(y, X).fit()
    if res.df_resid < 1:
        raise AnalysisError("control contrast: no residual degrees of freedom")
    L = np.zeros(X.shape[1])
    fact = [i for i, c in enumerate(names) if c != control]
    L[fact] = 1.0 / len(fact)
    L[names.index(control)] = -1.0
    counts = pd.crosstab(cells, blk) if blk is not None else cells.value_counts()
    balanced = np.asarray(counts).min() == np.asarray(counts).max() > 0
    errors, cov, df_ = "pooled", np.asarray(res.cov_params()), float(res.df_resid)
    h = np.asarray(res.get_influence().hat_matrix_diag)
    if not balanced and (h < 1 - 1e-8).all():
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            errors, cov, df_ = "HC2", np.asarray(res.cov_HC2), bm_df(X, L)
    elif not balanced:
        errors = POOLED_FALLBACK
    se = float(np.sqrt(max(L @ cov @ L, 0.0)))
    return Contrast(f"vs {control}", "every factorial arm against the control", float(L @ res.params), se, df_,
                    control.split("=", 1)[-1], errors)


def block_interaction(fit: Fit, term: tuple[str, ...]) -> BlockTest | None:
    """The block-by-term F test: the model with the term's columns times the block's added,
    against the model itself (statsmodels' `compare_f_test`). None where there is no block
    or no residual df left."""
    from statsmodels.regression.linear_model import OLS

    if fit.block_cols is None or term not in fit.slices:
        return None
    M = fit.X[:, fit.slices[term]]
    inter = np.column_stack([M[:, i] * fit.block_cols[:, j] for i in range(M.shape[1])
                             for j in range(fit.block_cols.shape[1])])
    X1 = np.column_stack([fit.X, inter])
    y = np.asarray(fit.result.model.endog, float)
    bigger = OLS(y, X1).fit()
    if bigger.df_resid < 1 or bigger.ssr <= 0 or bigger.df_model <= fit.result.df_model:
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        F, p, q = bigger.compare_f_test(fit.result)
    if not np.isfinite(F):
        return None
    return BlockTest(float(F), int(round(q)), float(bigger.df_resid), float(p))


# ---------------------------------------------------------------- deciding

def classify(estimate, se, df, alpha_star: float, margin: float | None) -> np.ndarray:
    """The verdicts of estimates (arrays broadcast) at alpha*: the rule of the module
    docstring, vectorised, so that a simulation runs the same code as a report."""
    estimate, se, df = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (estimate, se, df)))
    t1 = special.stdtrit(df, 1 - alpha_star / 2) * se
    t2 = special.stdtrit(df, 1 - alpha_star) * se
    matters = (estimate - t1 > 0) | (estimate + t1 < 0)
    if margin is None:
        negligible = beyond = np.zeros(estimate.shape, bool)
    else:
        negligible = (estimate - t2 > -margin) & (estimate + t2 < margin)
        beyond = matters & ((estimate - t2 > margin) | (estimate + t2 < -margin))
    return np.where(negligible, NEGLIGIBLE, np.where(beyond, BEYOND, np.where(matters, UNSURE, UNDECIDED)))


def distance_to_boundary(estimate: float, se: float, df: float, alpha_star: float, margin: float | None) -> float:
    """How far, in standard errors, the estimate lies from the nearest point where its
    verdict would change."""
    t1 = float(special.stdtrit(df, 1 - alpha_star / 2))
    t2 = float(special.stdtrit(df, 1 - alpha_star))
    edges = [t1 * se, -t1 * se]
    if margin is not None:
        edges += [margin + t2 * se, -margin - t2 * se]
        if margin - t2 * se > 0:
            edges += [margin - t2 * se, -margin + t2 * se]
    return float(min(abs(estimate - e) for e in edges) / se)


def decide(c: Contrast, response: str, alpha_star: float, margin: float | None, better: str,
           family: int, in_family: bool = True, errors: str = "pooled") -> Verdict:
    """The verdict of one contrast at alpha* (see the module docstring)."""
    if not (np.isfinite(c.se) and c.se > 0 and c.df >= 1):
        raise AnalysisError(f"{response} {c.term}: no standard error (too few runs)")
    t1 = stats.t.ppf(1 - alpha_star / 2, c.df)
    t2 = stats.t.ppf(1 - alpha_star, c.df)
    p = float(2 * stats.t.sf(abs(c.estimate / c.se), c.df))
    p_equiv = None
    if margin is not None:
        p_equiv = float(max(stats.t.sf((c.estimate + margin) / c.se, c.df),
                            stats.t.cdf((c.estimate - margin) / c.se, c.df)))
    verdict = str(classify(c.estimate, c.se, c.df, alpha_star, margin))
    return Verdict(response, c.term, c.label, verdict, c.estimate, c.se, c.df, alpha_star,
                   c.estimate - t1 * c.se, c.estimate + t1 * c.se, c.estimate - t2 * c.se, c.estimate + t2 * c.se,
                   margin, better, p, min(1.0, p * family), p_equiv,
                   power.t_detectable(c.se, c.df, alpha_star, DECISION_POWER),
                   distance_to_boundary(c.estimate, c.se, c.df, alpha_star, margin), in_family, errors)


def p_decided(theta: float, se: float, df: float, alpha_star: float, margin: float | None) -> float:
    """The probability that a contrast with true value `theta` and standard error `se` ends
    decided (either "matters" or "negligible") at alpha* (its estimate taken as normal,
    critical values t)."""
    # scipy.special's t quantile and normal cdf: what stats.t.ppf and stats.norm.cdf compute,
    # without their argument checks, since the plan calls this hundreds of times
    t1 = special.stdtrit(df, 1 - alpha_star / 2) * se
    regions = [(-np.inf, -t1), (t1, np.inf)]
    if margin is not None:
        t2 = special.stdtrit(df, 1 - alpha_star) * se
        if margin - t2 > -margin + t2:
            regions.append((-margin + t2, margin - t2))
    # the probability of the union of the regions
    edges = sorted(regions)
    merged = [list(edges[0])]
    for a, b in edges[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return float(sum(special.ndtr((b - theta) / se) - special.ndtr((a - theta) / se) for a, b in merged))


def blocks_to_decide(v: Verdict, replicates: int, n_cells: int, target: float = DECISION_POWER) -> int | None:
    """The fewest replicate blocks to add so that the term is decided with probability
    `target` if its true effect equals today's estimate: se shrinks as 1/sqrt(blocks) and
    each block adds n_cells - 1 residual degrees of freedom. None past MAX_BLOCKS."""
    k = 1
    while k <= MAX_BLOCKS:
        r = replicates + k
        se = v.se * math.sqrt(replicates / r)
        if p_decided(v.estimate, se, v.df + k * (n_cells - 1), v.alpha_star, v.margin) >= target:
            return k
        k = k + 1 if k < 16 else int(k * 1.25)
    return None


def sigma_interval(sigma: float, df: float, level: float = 0.95) -> tuple[float, float]:
    a = 1 - level
    return (float(sigma * math.sqrt(df / stats.chi2.ppf(1 - a / 2, df))),
            float(sigma * math.sqrt(df / stats.chi2.ppf(a / 2, df))))


def default_terms(factors: list[str], control: str | None, contrasts: dict | None = None) -> list[str]:
    """The family's terms when a spec names none: every main effect, every named contrast and
    the control."""
    return list(factors) + list(contrasts or {}) + ([control.split("=", 1)[-1]] if control else [])


def decide_all(df: pd.DataFrame, responses: list[str], factors: list[str], margins: dict[str, dict],
               alpha: float = 0.05, adjust: str = "bonferroni", control: str | None = None,
               primary_terms: list[str] | None = None, block_tests: bool = True,
               rules: Registry | None = None, contrasts: dict | None = None) -> Decision:
    """Verdicts for every contrast of every response. The family is the primary responses
    (those with a margin, or every one where none has) x the primary terms (`primary_terms`,
    or every main effect, named contrast and the control). `contrasts`: the spec's named
    contrasts ({name: {from: {factor: level}, to: {...}}}, `named_contrast`). `block_tests`: each family term's block-by-term
    test (a refit per term, the costliest part at hundreds of blocks), which the planner
    does not print. `rules`: the swept workload's registry (its better directions)."""
    rules = rules or registry()
    _check_settings(adjust, alpha)
    data = factorial_rows(df, factors)
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    rows = {r: with_value(data, r) for r in responses}  # each response on the runs that hold it
    fits = {r: fit_response(rows[r], r, factors, block) for r in responses}
    found = {r: _every_contrast(fits[r], rows[r], with_value(df, r), r, factors, control, contrasts)
             for r in responses}
    terms = list(primary_terms or default_terms(factors, control, contrasts))
    primary = [r for r in responses if r in margins] or list(responses)
    family = sum(c.group in terms for r in primary for c in found[r])
    if family == 0:
        raise AnalysisError(f"none of the primary terms ({', '.join(terms)}) can be estimated from these runs")
    alpha_star = alpha / family if adjust == "bonferroni" else alpha
    n_cells = int(data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups)
    reps = int(data[block].nunique()) if block else 1
    checks, verdicts = {}, []
    for r in responses:
        m = margins.get(r)
        better = (m or {}).get("better") or rules.better(r)
        margin = m["margin"] if m else None
        checks[r] = _check(r, fits[r], better, margin, r in primary, n_cells, reps, alpha_star)
        for c in found[r]:
            in_family = r in primary and c.group in terms
            errors = c.errors or fits[r].errors
            v = decide(c, r, alpha_star, margin, better, family, in_family, errors)
            if block_tests and in_family and not c.term.startswith("vs "):
                v.block = block_interaction(fits[r], tuple(c.group.split(":")))
            if v.verdict == UNDECIDED and block and in_family:
                k = v.blocks = blocks_to_decide(v, reps, n_cells)
                v.next_step = (f"{k} more block(s) ({k * n_cells} trials) would decide it "
                               f"({DECISION_POWER:.0%}, if the effect is as estimated)"
                               if k else f"more than {MAX_BLOCKS} more replicate blocks would be needed")
            verdicts.append(v)
    decision = Decision(alpha, adjust, alpha_star, family, checks, verdicts, terms)
    decision.simple = _simple(fits, rows, factors, primary, terms, margins, alpha_star, family, rules)
    return decision


def _every_contrast(fit: Fit, rows: pd.DataFrame, runs: pd.DataFrame, response: str, factors: list[str],
                    control: str | None, contrasts: dict | None) -> list[Contrast]:
    """One response's contrasts: every estimable term's, the named ones, the control's."""
    found = term_contrasts(fit, rows, factors)
    for name, sides in (contrasts or {}).items():
        if (c := named_contrast(fit, factors, name, sides)) is not None:
            found.append(c)
    if control is not None:
        found.append(control_contrast(runs, response, control, "replicate"))
    return found


def _check_settings(adjust: str, alpha: float) -> None:
    if adjust not in ADJUSTMENTS:
        raise AnalysisError(f"adjust: one of {', '.join(ADJUSTMENTS)}, got {adjust!r}")
    if not 0 < alpha < 1:
        raise AnalysisError(f"alpha: must lie in (0, 1), got {alpha!r}")


def _simple(fits: dict[str, Fit], rows: dict[str, pd.DataFrame], factors: list[str], primary: list[str],
            terms: list[str], margins: dict[str, dict], alpha_star: float, family: int,
            rules: Registry) -> list[SimpleEffect]:
    """Each primary main effect at every combination of the other factors' levels, decided
    at alpha* outside the family: what "it holds at every level" must rest on."""
    out = []
    if len(factors) < 2:
        return out
    for r in primary:
        m = margins.get(r) or {}
        for f in [t for t in terms if t in factors]:
            for where, c in simple_effects(fits[r], rows[r], factors, f):
                v = decide(c, r, alpha_star, m.get("margin"), m.get("better") or rules.better(r), family,
                           False, fits[r].errors)
                out.append(SimpleEffect(r, c.term, where, v))
    return out


def _check(r: str, fit: Fit, better: str, margin: float | None, primary: bool, n_cells: int, reps: int,
           alpha_star: float) -> ResponseCheck:
    res = fit.result
    sigma = float(np.sqrt(res.mse_resid))
    lo, hi = sigma_interval(sigma, res.df_resid)
    need = None
    if margin is not None and reps >= 2 and n_cells >= 2:
        need = tuple(_needed(margin, s, n_cells, alpha_star) for s in (lo, sigma, hi))
    return ResponseCheck(r, better, margin, primary, int(res.nobs), float(res.df_resid), sigma, lo, hi,
                         float(res.rsquared), float(res.rsquared_adj), fit.errors, n_cells, reps, need)


def _needed(effect: float, sigma: float, n_cells: int, alpha: float) -> int | None:
    try:
        return power.replicates_needed(effect, sigma, n_cells, alpha, DECISION_POWER)
    except ValueError:
        return None
