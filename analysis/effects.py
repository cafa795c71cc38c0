"""Effects of two-level factors in the design-of-experiments convention.

Each factor is coded -1 (low) / +1 (high); interactions are products of the codes. The
effect of a term is the mean response where its code is +1 minus the mean where it is -1,
which is twice its coefficient in the coded regression. Standard errors, t and p come from
that regression's residual; an unreplicated design has none, and `lenth` (Lenth 1989)
judges its effects from their own spread instead.

Default low/high: the seed's level is low and the corrected level high, where the config
field a factor varies is one of the audited ones (window, decay_gamma, confidence_input);
otherwise the first and second level in the factor's order.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
from statsmodels.regression.linear_model import OLS
from scipy import stats

from .anova import AnalysisError, check_design
from .coded_design import factorial_rows, levels as factor_levels

CONVENTIONAL = [("-", "+"), ("-1", "1"), ("-1", "+1"), ("low", "high"), ("lo", "hi"), ("0", "1"),
                ("False", "True"), ("off", "on"), ("no", "yes")]


def default_levels(df: pd.DataFrame, factor: str) -> tuple[str, str]:
    """(low, high) of a two-level factor: a coding that names its own direction (-/+,
    low/high, off/on, ...), else the spec's level order, which the store records: low is
    the first level listed, high the second (in the shipped sweeps, the seed's variant
    first and the paper's second, so an effect reads "what the correction moves")."""
    present = {str(v) for v in pd.unique(df[factor].dropna())}  # unique first: thousands of runs, few levels
    names = [str(lv) for lv in factor_levels(df, factor) if str(lv) in present]
    if len(names) != 2:
        raise AnalysisError(f"factor {factor!r} has {len(names)} levels; effects need exactly two")
    for low, high in CONVENTIONAL:
        if {lv.lower() for lv in names} == {low.lower(), high.lower()}:
            return tuple(sorted(names, key=lambda lv: lv.lower() != low.lower()))
    return names[0], names[1]


def coded(df: pd.DataFrame, factors: list[str], levels: dict[str, tuple[str, str]] | None = None):
    """(X coded -1/+1 with every interaction column, levels used)."""
    levels = dict(levels or {})
    used = {}
    cols = {}
    for f in factors:
        low, high = levels.get(f) or default_levels(df, f)
        vals = df[f].astype(str)
        bad = set(vals) - {low, high}
        if bad:
            raise AnalysisError(f"factor {f!r}: level(s) {', '.join(sorted(bad))} are neither low {low!r} nor high {high!r}")
        cols[f] = np.where(vals == high, 1.0, -1.0)
        used[f] = (low, high)
    X = {}
    for k in range(1, len(factors) + 1):
        for term in itertools.combinations(factors, k):
            X[":".join(term)] = np.prod([cols[f] for f in term], axis=0)
    return pd.DataFrame(X, index=df.index), used


def factorial_effects(df: pd.DataFrame, response: str, factors: list[str],
                      levels: dict[str, tuple[str, str]] | None = None, alpha: float = 0.05,
                      terms: list[str] | None = None, block: str | None = None) -> pd.DataFrame:
    """One row per main effect and interaction that the design can estimate: effect (high
    mean minus low mean), se, ci_low, ci_high, t, p. `terms` restricts the model (the rest
    pooled into the residual), e.g. to the terms an ANOVA kept so that both report from one
    model. `block` (e.g. replicate) enters as a fixed nuisance effect, as in the blocked
    ANOVA. `effects_with_levels` also says which level of each factor was low and high."""
    return effects_with_levels(df, response, factors, levels, alpha, terms, block)[0]


def effects_with_levels(df: pd.DataFrame, response: str, factors: list[str],
                        levels: dict[str, tuple[str, str]] | None = None, alpha: float = 0.05,
                        terms: list[str] | None = None,
                        block: str | None = None) -> tuple[pd.DataFrame, dict[str, tuple[str, str]]]:
    """`factorial_effects`' table and the (low, high) levels it used per factor."""
    factors = list(factors)
    check_design(df, response, factors)
    data = factorial_rows(df, factors)
    X, used = coded(data, factors, levels)
    y = pd.to_numeric(data[response]).to_numpy(dtype=float)
    # keep estimable columns, lowest order first (a fraction aliases higher-order terms)
    M = np.ones((len(y), 1))
    if block is not None:
        dummies = pd.get_dummies(data[block].astype(str), drop_first=True, dtype=float).to_numpy()
        M = np.column_stack([M, dummies]) if dummies.size else M
    n_nuisance = M.shape[1]
    if terms is not None:  # the ANOVA's terms, estimable on these same runs: no rank to check again
        keep = [name for name in X.columns if name in terms]
        M = np.column_stack([M, X[keep].to_numpy()])
    else:
        keep = []
        for name in X.columns:
            trial = np.column_stack([M, X[name].to_numpy()])
            if np.linalg.matrix_rank(trial) > np.linalg.matrix_rank(M):
                M = trial
                keep.append(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a saturated fit divides by df_resid = 0
        fit = OLS(y, M).fit()
        bse = np.asarray(fit.bse)[n_nuisance:]
    coef = np.asarray(fit.params)[n_nuisance:]
    rows = []
    saturated = fit.df_resid < 1
    tcrit = np.nan if saturated else stats.t.ppf(1 - alpha / 2, fit.df_resid)
    for i, name in enumerate(keep):
        effect = 2.0 * coef[i]
        se = np.nan if saturated else 2.0 * bse[i]
        t = effect / se if se and np.isfinite(se) and se > 0 else np.nan
        p = np.nan if not np.isfinite(t) else 2 * stats.t.sf(abs(t), fit.df_resid)
        rows.append({"term": name, "effect": effect, "se": se, "ci_low": effect - tcrit * se,
                     "ci_high": effect + tcrit * se, "t": t, "p": p, "df_resid": fit.df_resid,
                     "order": name.count(":") + 1})
    return pd.DataFrame(rows).set_index("term"), used


def lenth(effects, alpha: float = 0.05) -> dict:
    """Lenth's pseudo standard error for unreplicated two-level designs.

    s0 = 1.5 median|c|; PSE = 1.5 median{|c| : |c| < 2.5 s0}; with d = m/3 degrees of
    freedom, ME = t_{1-alpha/2, d} PSE and SME = t_{gamma, d} PSE, gamma = (1 + (1-alpha)^(1/m))/2.
    Returns pse, me, sme, df, and per effect `active` (|c| > ME) and `sme_active` (|c| > SME).
    """
    if isinstance(effects, pd.DataFrame):
        effects = effects["effect"]
    c = pd.Series(effects, dtype=float)
    m = len(c)
    if m < 2:
        raise AnalysisError("lenth: needs at least two effects")
    a = c.abs()
    s0 = 1.5 * a.median()
    pse = 1.5 * a[a < 2.5 * s0].median()
    d = m / 3.0
    me = stats.t.ppf(1 - alpha / 2, d) * pse
    gamma = (1 + (1 - alpha) ** (1.0 / m)) / 2
    sme = stats.t.ppf(gamma, d) * pse
    return {"s0": float(s0), "pse": float(pse), "me": float(me), "sme": float(sme), "df": d,
            "active": {k: bool(v > me) for k, v in a.items()},
            "sme_active": {k: bool(v > sme) for k, v in a.items()}}
