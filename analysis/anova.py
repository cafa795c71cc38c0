"""Factorial ANOVA with statsmodels.

Factors enter with sum-to-zero (effect) coding, `C(x, Sum)`, so Type III sums of squares
are right for unbalanced designs (with treatment coding they test simple effects at the
reference level instead). Columns are renamed to safe identifiers before the formula is
built, so a factor called `C` or `D1:x` cannot collide with formula syntax. Terms that the
design cannot estimate (aliased in a fraction, or empty cells) are left out, lowest order
first kept, and the model keeps at least one residual degree of freedom.
"""

from __future__ import annotations

import functools
import itertools
import warnings

from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from statsmodels.stats.anova import anova_lm


class AnalysisError(ValueError):
    """The data cannot answer the question asked; the message says why."""


def safe_names(names: list[str]) -> dict[str, str]:
    return {n: f"f{i}" for i, n in enumerate(names)}


def check_design(df: pd.DataFrame, response: str, factors: list[str]) -> None:
    """Refuse, with a reason, what no model can answer."""
    if response not in df.columns:
        raise AnalysisError(f"response {response!r} is not a column (have: {', '.join(map(str, df.columns))[:300]})")
    missing = [f for f in factors if f not in df.columns]
    if missing:
        raise AnalysisError(f"factor(s) {', '.join(missing)} not in the data")
    y = pd.to_numeric(df[response], errors="coerce")
    if y.isna().any():
        raise AnalysisError(f"response {response!r} has {int(y.isna().sum())} missing or non-numeric value(s)")
    if np.ptp(y.to_numpy()) == 0:
        raise AnalysisError(f"response {response!r} is constant ({y.iloc[0]!r}) across every run: nothing to attribute")
    for f in factors:
        levels = df[f].dropna().unique()
        if len(levels) < 2:
            raise AnalysisError(f"factor {f!r} has one level ({', '.join(map(str, levels))}): it has no effect to estimate")


def _terms(factors: list[str], max_order: int) -> list[tuple[str, ...]]:
    out = []
    for k in range(1, max_order + 1):
        out.extend(itertools.combinations(factors, k))
    return out


def estimable_terms(df: pd.DataFrame, factors: list[str], max_order: int | None = None,
                    block: str | None = None) -> list[tuple[str, ...]]:
    """Main effects and interactions the data can estimate, lowest order first, keeping
    at least one residual degree of freedom."""
    cols = factors + ([block] if block else [])
    # a design matrix's rank is that of its distinct rows: the search runs on those, once per
    # pattern of cells and blocks (the verdicts' refits ask the same question many times)
    distinct = tuple(sorted(set(map(tuple, df[cols].astype(str).to_numpy()))))
    return list(_estimable(distinct, len(df), tuple(factors), max_order or len(factors), block is not None))


@functools.lru_cache(maxsize=256)
def _estimable(distinct: tuple[tuple[str, ...], ...], n: int, factors: tuple[str, ...], max_order: int,
               has_block: bool) -> tuple[tuple[str, ...], ...]:
    import patsy

    names = [f"f{i}" for i in range(len(factors) + has_block)]
    data = pd.DataFrame(list(distinct), columns=names)
    safe = dict(zip(factors, names))
    X = np.ones((len(data), 1))
    if has_block:
        B = patsy.dmatrix(f"C({names[-1]}, Sum) - 1", data, return_type="dataframe").to_numpy()
        X = np.column_stack([X, B[:, 1:]]) if B.shape[1] > 1 else X
    rank = np.linalg.matrix_rank(X)
    kept = []
    for term in _terms(list(factors), max_order):
        spec = ":".join(f"C({safe[f]}, Sum)" for f in term)
        M = patsy.dmatrix(f"{spec} - 1", data, return_type="dataframe").to_numpy()
        # the columns a term adds beyond its lower-order parts
        trial = np.column_stack([X, M])
        new_rank = np.linalg.matrix_rank(trial)
        if new_rank == rank:
            continue  # aliased with what is already in the model
        if new_rank >= n:
            continue  # would leave no residual degree of freedom
        X, rank = trial, new_rank
        kept.append(term)
    return tuple(kept)


def model_formula(response_col: str, terms, safe, block: str | None) -> str:
    parts = [":".join(f"C({safe[f]}, Sum)" for f in t) for t in terms]
    if block:
        parts.append(f"C({safe[block]}, Sum)")
    return f"{response_col} ~ " + " + ".join(parts)


def ols_fit(data: pd.DataFrame, response: str, factors: list[str], block: str | None, terms):
    """The OLS of the response on these terms (+ the block, all sum-coded): the one fit of a
    response on its runs, which the ANOVA table (`anova_with_fit`) and the contrasts
    (`analysis.model.fit_response`) both read, so a report fits each response once."""
    cols = list(factors) + ([block] if block else [])
    rows = tuple(map(tuple, data[cols].astype(str).to_numpy()))
    y = tuple(pd.to_numeric(data[response]).to_numpy(dtype=float).tolist())
    return _ols(rows, y, tuple(factors), block, tuple(map(tuple, terms)))


@functools.lru_cache(maxsize=64)
def _ols(rows: tuple, y: tuple, factors: tuple, block: str | None, terms: tuple):
    safe = safe_names(list(factors) + ([block] if block else []))
    rdata = pd.DataFrame(list(rows), columns=list(safe.values()))
    rdata["y__"] = np.asarray(y, dtype=float)
    return smf.ols(model_formula("y__", terms, safe, block), data=rdata).fit()


@dataclass(frozen=True)
class ModelFit:
    """How well one response's OLS model fits, as a DOE report states it."""
    n: int  # runs in the fit
    df_resid: float
    s: float  # the residual standard deviation, sqrt(MSE)
    r2: float
    r2_adj: float
    resid: pd.Series  # by the runs' row labels
    fitted: pd.Series
    dropped: tuple[str, ...] = ()  # terms asked for that these runs cannot estimate


def factorial_anova(df: pd.DataFrame, response: str, factors: list[str], typ: int = 2,
                    block: str | None = None, max_order: int | None = None) -> pd.DataFrame:
    """One row per estimable term (`D1`, `D1:D9`, ...), the block when given, and
    `Residual`; columns sum_sq, df, F, p, partial_eta_sq. The terms these runs cannot
    estimate are `anova_with_fit`'s `ModelFit.dropped`."""
    return anova_with_fit(df, response, factors, typ, block, max_order)[0]


def anova_with_fit(df: pd.DataFrame, response: str, factors: list[str], typ: int = 2,
                   block: str | None = None, max_order: int | None = None) -> tuple[pd.DataFrame, ModelFit]:
    """`factorial_anova`'s table and the model's fit (S, R², adjusted R², residuals)."""
    if typ not in (1, 2, 3):
        raise AnalysisError(f"typ: 1, 2 or 3, got {typ!r}")
    factors = list(factors)
    check_design(df, response, factors)
    data = df[[response] + factors + ([block] if block else [])].copy()
    data = data.dropna(subset=factors)  # control arms sit outside the factorial
    terms = estimable_terms(data, factors, max_order, block)
    if not terms:
        raise AnalysisError(f"too few runs ({len(data)}) to estimate any term of {', '.join(factors)}")
    asked = _terms(factors, max_order or len(factors))
    safe = safe_names(factors + ([block] if block else []))
    model = ols_fit(data, response, factors, block, terms)
    if model.df_resid < 1:
        raise AnalysisError(f"too few runs ({len(data)}) for the terms asked: no residual degrees of freedom")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = anova_lm(model, typ=typ)
    if "Intercept" in table.index:
        table = table.drop(index="Intercept")
    back = {}
    for t in terms:
        back[":".join(f"C({safe[f]}, Sum)" for f in t)] = ":".join(t)
    if block:
        back[f"C({safe[block]}, Sum)"] = block
    table = table.rename(index=back)
    table = table.rename(columns={"PR(>F)": "p"})
    ss_res = table.loc["Residual", "sum_sq"]
    table["partial_eta_sq"] = table["sum_sq"] / (table["sum_sq"] + ss_res)
    table.loc["Residual", ["F", "p", "partial_eta_sq"]] = np.nan
    table = table[["sum_sq", "df", "F", "p", "partial_eta_sq"]]
    dropped = [":".join(t) for t in asked if t not in terms]
    fit = ModelFit(n=int(model.nobs), df_resid=float(model.df_resid), s=float(np.sqrt(model.mse_resid)),
                   r2=float(model.rsquared), r2_adj=float(model.rsquared_adj),
                   resid=pd.Series(np.asarray(model.resid, float), index=data.index),
                   fitted=pd.Series(np.asarray(model.fittedvalues, float), index=data.index),
                   dropped=tuple(dropped))
    return table, fit
