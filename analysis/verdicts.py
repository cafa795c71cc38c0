"""Verdicts: every term of every primary response ends "matters", "negligible" or "undecided".

One alpha decides everything. The family is every (primary response, contrast) pair; each
is tested at alpha* = alpha / m (Bonferroni, m the family's size; `adjust="none"` gives
alpha* = alpha). Bonferroni and not Holm: a step-down rule can reject a hypothesis whose
own interval at its printed level still holds zero, and no sentence may contradict the
interval printed beside it. With alpha* fixed, for an estimate e with standard error se
and df residual degrees of freedom:

- matters: the two-sided t test of "no effect" rejects at alpha*, i.e. the (1 - alpha*)
  interval e +- t_{1-alpha*/2, df} se excludes zero (and the term is not negligible);
- negligible: both one-sided tests against -margin and +margin reject at alpha* (TOST), i.e.
  the (1 - 2 alpha*) interval e +- t_{1-alpha*, df} se lies inside (-margin, +margin). Where
  that interval also excludes zero it is "detected, smaller than the margin";
- undecided: neither. A response with no margin can only be "matters" or "undecided".

Contrasts come from one OLS per response: the terms the design can estimate (sum coding,
`analysis.anova`), the replicate as an additive block. A two-level term's contrast is the
DOE effect (mean where its coded product is +1 minus mean where it is -1, over cell
means). A factor of more than two levels enters as every pair of its levels (`D1[a->b]`),
each its own hypothesis in the same family: pairwise contrasts with the family's
Bonferroni adjustment, never the F test's power. A control arm adds one contrast: every
factorial arm pooled against it.

Errors are the model's pooled OLS errors unless the Breusch-Pagan test (studentized,
against the factors' main effects) rejects at 0.05: then every interval and test of that
response uses heteroscedasticity-consistent HC3 errors. With three or more replicate
blocks each estimate is refitted without each block in turn and judged with the full
sweep's standard error; a verdict that changes is fragile: it rests on one block's values,
not only on the number of blocks (fewer blocks always widen the interval).
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import special, stats

from dspark import metrics

from . import power
from .anova import AnalysisError, _formula, _safe, estimable_terms
from .design import factorial_rows, levels, plain, with_value
from .load import SweepRecord

ADJUSTMENTS = ("bonferroni", "none")
HETERO_ALPHA = 0.05  # the Breusch-Pagan level at which a response switches to HC3 errors
DECISION_POWER = 0.8  # the planner's target: the probability that the next step decides a term
MAX_BLOCKS = 1000
VERDICTS = ("matters", "negligible", "undecided")


@dataclass(frozen=True)
class Contrast:
    term: str  # D1, D1:D9, D1[shifted->aligned], vs control=pure_ce
    label: str  # what the difference is, e.g. "shifted -> aligned"
    estimate: float
    se: float
    df: float


@dataclass
class Verdict:
    response: str
    term: str
    label: str
    verdict: str  # matters | negligible | undecided
    estimate: float
    se: float
    df: float
    alpha_star: float
    ci_low: float  # the (1 - alpha*) interval: the test of "no effect"
    ci_high: float
    eq_low: float  # the (1 - 2 alpha*) interval: the equivalence test
    eq_high: float
    margin: float | None
    better: str
    p: float  # two-sided, unadjusted
    p_adj: float  # p times the family's size (capped at 1)
    p_equiv: float | None  # TOST: the larger one-sided p, unadjusted
    detectable: float  # the true effect the test rejects with 80% power at alpha*
    fragile: str = ""  # why leave-one-block-out changes it; "" when it does not or cannot
    next_step: str = ""  # for an undecided term: what would decide it
    blocks: int | None = None  # replicate blocks to add that would decide it (80%), None if unknown

    @property
    def detected(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    def direction(self) -> str:
        """'better' or 'worse' for a detected main effect or control contrast (an
        interaction's sign says how effects combine, not which arm is better)."""
        if not self.detected or not self.better or not self.label:
            return ""
        good = (self.estimate > 0) == (self.better == "higher")
        return "better" if good else "worse"

    def text(self) -> str:
        """One sentence that starts with `<term>: <verdict>` and agrees with its interval."""
        lvl = _pct(1 - self.alpha_star)
        what = f"{self.label}: " if self.label else ""
        if self.verdict == "matters":
            way = self.direction()
            out = (f"{self.term}: matters ({what}{self.estimate:+.4g} [{self.ci_low:+.4g}, {self.ci_high:+.4g}] "
                   f"at {lvl}{', ' + way if way else ''})")
        elif self.verdict == "negligible":
            out = (f"{self.term}: negligible within +-{self.margin:g} ({what}{self.estimate:+.4g} "
                   f"[{self.eq_low:+.4g}, {self.eq_high:+.4g}] at {_pct(1 - 2 * self.alpha_star)})")
            if self.eq_low > 0 or self.eq_high < 0:
                out += "; detected, smaller than the margin"
        else:
            out = (f"{self.term}: undecided ({what}{self.estimate:+.4g} [{self.ci_low:+.4g}, {self.ci_high:+.4g}] "
                   f"at {lvl}")
            if self.margin is None:
                out += "; no margin declared, so negligible cannot be shown)"
            else:
                out += (f"; not shown within +-{self.margin:g}: [{self.eq_low:+.4g}, {self.eq_high:+.4g}] at "
                        f"{_pct(1 - 2 * self.alpha_star)})")
            if math.isfinite(self.detectable):
                out += f"; this sweep detects {self.detectable:.3g} or more with {DECISION_POWER:.0%} power"
            if self.next_step:
                out += f"; {self.next_step}"
        if self.fragile:
            out += f" [fragile: {self.fragile}]"
        return out


@dataclass
class ResponseCheck:
    """What a response's verdicts rest on: the model's fit and errors, sigma with its own
    interval, and the replicates that sigma implies for a margin-sized effect."""
    response: str
    better: str
    margin: float | None
    primary: bool
    n: int
    df_resid: float
    sigma: float
    sigma_low: float  # 95% interval of sigma (chi-square on df_resid)
    sigma_high: float
    r2: float
    r2_adj: float
    bp_p: float  # Breusch-Pagan p (nan when it cannot be computed)
    errors: str  # "OLS" or "HC3"
    n_cells: int
    replicates: int
    replicates_for_margin: tuple[int | None, int | None, int | None] | None = None  # at sigma low, point, high
    lobo: str = ""  # leave-one-block-out: what was checked

    def text(self, alpha_star: float) -> str:
        parts = [f"{self.better} is better" if self.better else "no better direction",
                 f"margin +-{self.margin:g}" if self.margin is not None else "no margin declared",
                 f"sigma {self.sigma:.3g} [95% CI {self.sigma_low:.3g}, {self.sigma_high:.3g}] on {self.df_resid:g} df",
                 f"R2 {self.r2:.2f} (adj {self.r2_adj:.2f})"]
        if self.errors == "HC3":
            parts.append(f"HC3 errors: Breusch-Pagan p={self.bp_p:.2g} < {HETERO_ALPHA}, variances differ")
        elif np.isfinite(self.bp_p):
            parts.append(f"pooled errors (Breusch-Pagan p={self.bp_p:.2g})")
        if self.replicates_for_margin:
            lo, mid, hi = (_reps(v) for v in self.replicates_for_margin)
            parts.append(f"replicates to detect +-{self.margin:g} with {DECISION_POWER:.0%} power at alpha*: {mid} "
                         f"({lo}-{hi} over sigma's CI)")
        return f"{self.response} ({'; '.join(parts)})"


@dataclass
class Decision:
    alpha: float
    adjust: str
    alpha_star: float
    family: int
    checks: dict[str, ResponseCheck]
    verdicts: list[Verdict]
    notes: list[str] = field(default_factory=list)

    def of(self, response: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.response == response]

    def primary(self) -> list[str]:
        return [r for r, c in self.checks.items() if c.primary]

    def table(self) -> pd.DataFrame:
        cols = ["response", "term", "label", "verdict", "estimate", "se", "df", "ci_low", "ci_high", "eq_low",
                "eq_high", "margin", "better", "p", "p_adj", "p_equiv", "detectable", "alpha_star", "fragile",
                "next_step"]
        return pd.DataFrame([{c: getattr(v, c) for c in cols} for v in self.verdicts], columns=cols)

    def counts(self) -> dict[str, int]:
        prim = set(self.primary())
        return {k: sum(v.verdict == k for v in self.verdicts if v.response in prim) for k in VERDICTS}

    def method(self) -> str:
        adj = (f"Bonferroni over {self.family} hypotheses" if self.adjust == "bonferroni" else "no adjustment")
        return (f"one alpha for every verdict: alpha {self.alpha:g}, {adj}, so each test runs at alpha* = "
                f"{self.alpha_star:.3g}; intervals: {_pct(1 - self.alpha_star)} for 'matters' and "
                f"'undecided', {_pct(1 - 2 * self.alpha_star)} (TOST) for 'negligible'; factors of more than "
                "two levels as pairwise contrasts in the same family")


def _pct(level: float) -> str:
    s = f"{100 * level:.3f}".rstrip("0").rstrip(".")
    return f"{s}%"


def _reps(v: int | None) -> str:
    return f">{power.MAX_REPLICATES}" if v is None else str(v)


# ---------------------------------------------------------------- margins

def margins_for(df: pd.DataFrame, given: dict[str, float] | None = None) -> dict[str, dict]:
    """The primary responses: the spec's (the runs' `responses` record), with `given`
    (`--margin RESPONSE=VALUE`) supplying or overriding margins. Better directions are the
    registry's."""
    out = {}
    for name, decl in dict(SweepRecord.of(df).responses).items():
        out[name] = {"better": decl.get("better") or metrics.better(name), "margin": float(decl["margin"])}
    for name, margin in (given or {}).items():
        if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin > 0):
            raise AnalysisError(f"--margin {name}: must be a finite number > 0, got {margin!r}")
        out[name] = {"better": metrics.better(name), "margin": float(margin)}
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
    """One response's OLS: the fit, its terms, the errors used and the cell-averaged design rows."""
    result: object  # statsmodels RegressionResults
    terms: list[tuple[str, ...]]
    cov: np.ndarray
    errors: str
    bp_p: float
    cell_rows: dict[tuple[str, ...], np.ndarray]


def fit_response(data: pd.DataFrame, response: str, factors: list[str], block: str | None,
                 errors: str = "auto") -> Fit:
    """OLS of the response on the estimable terms (+ the block), with pooled or HC3 errors
    (`errors`: "auto" chooses by the Breusch-Pagan test)."""
    from statsmodels.regression.linear_model import OLS
    from statsmodels.stats.diagnostic import het_breuschpagan

    terms = estimable_terms(data, factors, None, block)
    if not terms:
        raise AnalysisError(f"{response}: too few runs ({len(data)}) to estimate any term")
    cols = factors + ([block] if block else [])
    design, main, cell_rows = _design(tuple(map(tuple, data[cols].astype(str).to_numpy())), tuple(factors), block,
                                      tuple(terms))
    y = pd.Series(pd.to_numeric(data[response]).to_numpy(dtype=float), name="y__")
    result = OLS(y, design).fit()
    if result.df_resid < 1:
        raise AnalysisError(f"{response}: no residual degrees of freedom for the terms the design estimates")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            bp_p = float(het_breuschpagan(result.resid, main)[1])
        except (ValueError, np.linalg.LinAlgError):
            bp_p = float("nan")
    use = errors if errors != "auto" else ("HC3" if np.isfinite(bp_p) and bp_p < HETERO_ALPHA else "OLS")
    cov = np.asarray(result.cov_params())
    if use == "HC3":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            hc3 = np.asarray(result.cov_HC3)
        if np.isfinite(hc3).all():
            cov = hc3
        else:  # a run with leverage 1 (a cell seen once) leaves HC3 undefined
            use = "OLS"
    return Fit(result, terms, cov, use, bp_p, dict(cell_rows))


@functools.lru_cache(maxsize=64)
def _design(rows: tuple[tuple[str, ...], ...], factors: tuple[str, ...], block: str | None,
            terms: tuple[tuple[str, ...], ...]) -> tuple[pd.DataFrame, np.ndarray, dict]:
    """The model's design for these runs' levels (one row of factor levels, + the block, per
    run): the design matrix, the main effects' columns (for the Breusch-Pagan test) and each
    cell's design row averaged over the blocks, so that contrasts of cells cancel the block.
    It depends on the levels alone, so the responses fitted on the same runs share it."""
    import patsy

    safe = _safe(list(factors) + ([block] if block else []))
    rdata = pd.DataFrame(list(rows), columns=list(safe.values()))
    rhs = _formula("y__", list(factors), terms, safe, block).split("~", 1)[1]
    design = patsy.dmatrix(rhs, rdata, return_type="dataframe")
    main = patsy.dmatrix(" + ".join(f"C({safe[f]}, Sum)" for f in factors), rdata, return_type="dataframe").to_numpy()
    cells = sorted({r[:len(factors)] for r in rows})
    blocks = sorted({r[-1] for r in rows}) if block else [None]
    grid = pd.DataFrame([{**{safe[f]: c[i] for i, f in enumerate(factors)},
                          **({safe[block]: b} if block else {})} for c in cells for b in blocks])
    X = np.asarray(patsy.build_design_matrices([design.design_info], grid)[0])
    means = X.reshape(len(cells), len(blocks), -1).mean(axis=1)
    return design, main, {c: means[i] for i, c in enumerate(cells)}


def _pairs(data: pd.DataFrame, factor: str) -> list[tuple[str, str, bool]]:
    """(low, high, pairwise) level pairs of a factor: its one pair in the effects'
    convention for two levels, every pair in the spec's order for more."""
    from .effects import default_levels

    seen = set(data[factor].astype(str))
    present = [str(v) for v in levels(data, factor) if str(v) in seen]
    if len(present) == 2:
        low, high = default_levels(data, factor)
        return [(str(low), str(high), False)]
    return [(a, b, True) for a, b in itertools.combinations(present, 2)]


def contrasts(fit: Fit, data: pd.DataFrame, factors: list[str]) -> list[Contrast]:
    """Every estimable term's contrast(s): the estimate, its standard error and df."""
    out = []
    params = np.asarray(fit.result.params)
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
            L = sum(w * fit.cell_rows[c] for c, w in weights.items()) / (len(weights) / 2.0)
            name = ":".join(f"{f}[{lo}->{hi}]" if pw else f for f, (lo, hi, pw) in zip(term, combo))
            label = f"{combo[0][0]} -> {combo[0][1]}" if len(term) == 1 and not combo[0][2] else ""
            se = float(np.sqrt(max(L @ fit.cov @ L, 0.0)))
            out.append(Contrast(name, label, float(L @ params), se, float(fit.result.df_resid)))
    return out


def control_contrast(df: pd.DataFrame, response: str, control: str, block: str | None,
                     errors: str) -> Contrast:
    """Every factorial arm pooled against the control arm, from an OLS with the replicate as
    a block, with the response's errors (pooled or HC3)."""
    import statsmodels.formula.api as smf

    if control not in set(df["cell"]):
        raise AnalysisError(f"control arm {control!r} not found")
    arm = df["arm"].astype(str) if "arm" in df.columns else pd.Series("factorial", index=df.index)
    keep = (df["cell"] == control) | (arm == "factorial")
    data = pd.DataFrame({"y": pd.to_numeric(df.loc[keep, response]).to_numpy(float),
                         "treated": (df.loc[keep, "cell"] != control).astype(float).to_numpy()})
    use_block = block is not None and block in df.columns and df.loc[keep, block].nunique() > 1
    if use_block:
        data["blk"] = df.loc[keep, block].astype(str).to_numpy()
    if data["treated"].nunique() < 2 or len(data) < 4:
        raise AnalysisError("control contrast: needs factorial runs and control runs")
    fit = smf.ols("y ~ treated" + (" + C(blk)" if use_block else ""), data=data).fit()
    i = list(fit.params.index).index("treated")
    cov = np.asarray(fit.cov_HC3 if errors == "HC3" else fit.cov_params())
    se = float(np.sqrt(cov[i, i])) if np.isfinite(cov[i, i]) else float(np.sqrt(fit.cov_params().iloc[i, i]))
    return Contrast(f"vs {control}", "every factorial arm against the control", float(fit.params["treated"]),
                    se, float(fit.df_resid))


# ---------------------------------------------------------------- deciding

def classify(estimate, se, df, alpha_star: float, margin: float | None) -> np.ndarray:
    """The verdicts of estimates (arrays broadcast) at alpha*: the rule of the module
    docstring, vectorised, so that a simulation runs the same code as a report."""
    estimate, se, df = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (estimate, se, df)))
    t1 = stats.t.ppf(1 - alpha_star / 2, df) * se
    t2 = stats.t.ppf(1 - alpha_star, df) * se
    matters = (estimate - t1 > 0) | (estimate + t1 < 0)
    negligible = ((estimate - t2 > -margin) & (estimate + t2 < margin)) if margin is not None \
        else np.zeros(estimate.shape, bool)
    return np.where(negligible, "negligible", np.where(matters, "matters", "undecided"))


def decide(c: Contrast, response: str, alpha_star: float, margin: float | None, better: str,
           family: int) -> Verdict:
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
                   power.t_detectable(c.se, c.df, alpha_star, DECISION_POWER))


def p_decided(theta: float, se: float, df: float, alpha_star: float, margin: float | None) -> float:
    """The probability that a contrast with true value `theta` and standard error `se` ends
    "matters" or "negligible" at alpha* (its estimate taken as normal, critical values t)."""
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


def decide_all(df: pd.DataFrame, responses: list[str], factors: list[str], margins: dict[str, dict],
               alpha: float = 0.05, adjust: str = "bonferroni", control: str | None = None,
               fragility: bool = True) -> Decision:
    """Verdicts for every contrast of every response. The family is the primary responses'
    contrasts (those with a margin), or every response's where none has one. `fragility`:
    refit without each replicate block to mark fragile verdicts (which `plan` never shows)."""
    if adjust not in ADJUSTMENTS:
        raise AnalysisError(f"adjust: one of {', '.join(ADJUSTMENTS)}, got {adjust!r}")
    if not 0 < alpha < 1:
        raise AnalysisError(f"alpha: must lie in (0, 1), got {alpha!r}")
    data = plain(factorial_rows(df, factors))
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    fits, found = {}, {}
    rows = {r: with_value(data, r) for r in responses}  # each response on the runs that hold it
    for r in responses:
        fits[r] = fit_response(rows[r], r, factors, block)
        found[r] = contrasts(fits[r], rows[r], factors)
        if control is not None:
            found[r].append(control_contrast(with_value(df, r), r, control, "replicate", fits[r].errors))
    primary = [r for r in responses if r in margins] or list(responses)
    family = sum(len(found[r]) for r in primary)
    alpha_star = alpha / family if adjust == "bonferroni" else alpha
    n_cells = int(data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups)
    reps = int(data[block].nunique()) if block else 1
    checks, verdicts = {}, []
    for r in responses:
        m = margins.get(r)
        better = (m or {}).get("better") or metrics.better(r)
        margin = m["margin"] if m else None
        checks[r] = _check(r, fits[r], better, margin, r in primary, n_cells, reps, alpha_star)
        for c in found[r]:
            v = decide(c, r, alpha_star, margin, better, family)
            if v.verdict == "undecided" and block:
                k = v.blocks = blocks_to_decide(v, reps, n_cells)
                v.next_step = (f"{k} more replicate block(s) ({k * n_cells} trials) would decide it with "
                               f"{DECISION_POWER:.0%} probability if the effect is as estimated"
                               if k else f"more than {MAX_BLOCKS} more replicate blocks would be needed")
            verdicts.append(v)
    decision = Decision(alpha, adjust, alpha_star, family, checks, verdicts)
    if fragility:
        _leave_one_block_out(decision, rows, factors, block, fits)
    else:
        for c in checks.values():
            c.lobo = "leave-one-block-out: not checked"
    return decision


def _check(r: str, fit: Fit, better: str, margin: float | None, primary: bool, n_cells: int, reps: int,
           alpha_star: float) -> ResponseCheck:
    res = fit.result
    sigma = float(np.sqrt(res.mse_resid))
    lo, hi = sigma_interval(sigma, res.df_resid)
    need = None
    if margin is not None and reps >= 2 and n_cells >= 2:
        need = tuple(_needed(margin, s, n_cells, alpha_star) for s in (lo, sigma, hi))
    return ResponseCheck(r, better, margin, primary, int(res.nobs), float(res.df_resid), sigma, lo, hi,
                         float(res.rsquared), float(res.rsquared_adj), fit.bp_p, fit.errors, n_cells, reps, need)


def _needed(effect: float, sigma: float, n_cells: int, alpha: float) -> int | None:
    try:
        return power.replicates_needed(effect, sigma, n_cells, alpha, DECISION_POWER)
    except ValueError:
        return None


def _leave_one_block_out(decision: Decision, rows: dict[str, pd.DataFrame], factors: list[str],
                         block: str | None, fits: dict[str, Fit]) -> None:
    """Refit each response without each replicate block; a verdict that changes is fragile."""
    blocks = sorted(set().union(*(set(d[block].unique()) for d in rows.values()))) if block and rows else []
    if len(blocks) < 3:
        for c in decision.checks.values():
            c.lobo = (f"leave-one-block-out needs 3 or more replicate blocks; this sweep has {len(blocks) or 1}: "
                      "not checked")
        return
    by_key = {(v.response, v.term): v for v in decision.verdicts}
    for r, check in decision.checks.items():
        changed = 0
        data = rows[r]
        for b in blocks:
            sub = data[data[block] != b]
            try:
                fit = fit_response(sub, r, factors, block if sub[block].nunique() > 1 else None,
                                   errors=fits[r].errors)
                found = contrasts(fit, sub, factors)
            except AnalysisError:
                continue
            for c in found:
                v = by_key.get((r, c.term))
                if v is None:
                    continue
                # the reduced estimate judged with the full sweep's standard error: a verdict that
                # changes then depends on which blocks are in, not only on how many
                same_precision = Contrast(c.term, c.label, c.estimate, v.se, v.df)
                again = decide(same_precision, r, v.alpha_star, v.margin, v.better, decision.family).verdict
                if again != v.verdict:
                    changed += not v.fragile
                    v.fragile += ("; " if v.fragile else "") + f"without replicate block {b} it is {again}"
        check.lobo = (f"leave-one-block-out over {len(blocks)} blocks: "
                      + (f"{changed} verdict(s) fragile" if changed else "no verdict changes"))
