"""The linear model behind every verdict: one OLS per response on the terms the design can
estimate (sum coding, `analysis.anova`), the replicate as an additive block, and the
contrasts read off it: each term's (the DOE effect, or every pair of levels of a factor of
more than two), a spec's named contrasts (two settings of some factors), a main effect at
each level of the others, the pooled arms against a control, and the block-by-term test.
Each contrast keeps its row L of the model, so that `analysis.variance` can say what its
error is made of.

Errors match the design. In a balanced design (every cell in every block, equally often)
the pooled OLS errors are unbiased for a contrast that weighs every cell equally (a two-level
term's) even where cell variances differ; for contrasts with unequal weights (a pair of
levels of a factor of three, a named contrast, the control) that holds only where the cell
variances are equal, which the residual plots show. Where the design is unbalanced
(missing runs, or a control arm of a different size), the errors are HC2 with the
Satterthwaite degrees of freedom of Bell & McCaffrey (2002): the df of the scaled
chi-square that matches the HC2 variance's first two moments under homoskedastic errors.
"""

from __future__ import annotations

import functools
import itertools
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .anova import AnalysisError, estimable_terms, model_formula, ols_fit, safe_names
from .coded_design import levels
from .effects import default_levels
from .result_types import BlockTest, Contrast

POOLED_FALLBACK = "pooled (HC2 undefined: a cell seen once)"

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
    terms = estimable_terms(data, factors, None, block)
    if not terms:
        raise AnalysisError(f"{response}: too few runs ({len(data)}) to estimate any term")
    cols = factors + ([block] if block else [])
    design, cell_rows, slices, block_cols = _design(tuple(map(tuple, data[cols].astype(str).to_numpy())),
                                                    tuple(factors), block, tuple(terms))
    result = ols_fit(data, response, factors, block, terms)
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
    rhs = model_formula("y__", terms, safe, block).split("~", 1)[1]
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
    return Contrast(term, label, float(L @ np.asarray(fit.result.params)), se, fit.df_of(L), group, L=L)


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
    return Contrast(name, label, float(L @ np.asarray(fit.result.params)), se, fit.df_of(L), name, L=L)


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
    ms = (float(fit.result.ssr) - float(bigger.ssr)) / q
    return BlockTest(float(F), int(round(q)), float(bigger.df_resid), float(p), ms)


def own_error_terms(fit: Fit, found: list[Contrast], primary: bool, terms: list[str],
                     factors: list[str]) -> list[tuple[str, ...]]:
    """The terms judged on their own block x term error: those the family's contrasts rest on
    (`tested_terms`) and, for a primary response of several factors, every term its simple
    effects span, so that they stand on the same error model as their main effect."""
    tested = tested_terms(fit, found, primary, terms)
    if primary and len(factors) > 1:
        tested += [t for t in fit.slices if t not in tested and set(t) & set(terms) & set(factors)]
    return tested


def tested_terms(fit: Fit, found: list[Contrast], primary: bool, terms: list[str]) -> list[tuple[str, ...]]:
    """The terms whose block-by-term tests the family's contrasts rest on: each family term's
    own, and every term a named contrast spans."""
    out = []
    for c in found:
        if not primary or c.group not in terms or c.L is None:
            continue
        for t, s in fit.slices.items():
            if t not in out and np.any(np.abs(c.L[s]) > 1e-12):
                out.append(t)
    return out
