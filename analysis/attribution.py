"""Attribution across several responses: ANOVA and effects per response, p-values
adjusted across responses (Holm or Benjamini-Hochberg), and a many-to-one comparison of
every arm against a control arm (Dunnett) where the sweep has one.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.multitest import multipletests

from trials.registry import Registry

from .anova import AnalysisError, anova_with_fit, check_design
from .coded_design import factorial_rows, levels, with_value, without_value
from .effects import effects_with_levels
from .model import control_contrast as contrast, is_balanced
from .report_types import ResponseResult

ADJUST = {"holm": "holm", "bh": "fdr_bh", "none": None}

def stage_of(df: pd.DataFrame, rules: Registry) -> str | None:
    """The variant of the sweep's runs (DSpark: their parallel stage, which decides what a
    metric can rank, README "Two questions"), or None when mixed or unknown."""
    if not rules.variant_field or rules.variant_field not in df.columns:
        return None
    stages = set(df[rules.variant_field].dropna().astype(str))
    return stages.pop() if len(stages) == 1 else None


def empty_cells(df: pd.DataFrame, factors: list[str]) -> list[str]:
    """Cells of the full crossing of the factors' levels that hold no run."""
    present = set(map(tuple, df[factors].astype(str).to_numpy()))
    return ["|".join(f"{f}={lv}" for f, lv in zip(factors, combo))
            for combo in itertools.product(*[[str(v) for v in levels(df, f)] for f in factors])
            if combo not in present]


def analyse(df: pd.DataFrame, responses: list[str], factors: list[str], typ: int | None = None,
            block: str | None = None, adjust: str = "holm", full_design: bool = True) -> dict[str, ResponseResult]:
    """ANOVA (+ effects when every factor has two levels) per response, with the p-values
    of every term adjusted across responses. Refuses what cannot be analysed."""
    if adjust not in ADJUST:
        raise AnalysisError(f"adjust: one of {', '.join(ADJUST)}, got {adjust!r}")
    data = factorial_rows(df, factors)
    for f in factors:
        if f not in data.columns:
            raise AnalysisError(f"factor {f!r} not in the data")
        levels = data[f].dropna().unique()
        if len(levels) < 2:
            raise AnalysisError(f"factor {f!r} has one level ({', '.join(map(str, levels))}): "
                                "it has no effect to estimate")
    if full_design:
        empty = empty_cells(data, factors)
        if empty:
            raise AnalysisError(f"{len(empty)} empty cell(s), e.g. {empty[0]}: the design is incomplete "
                                "(rerun the failed trials, or analyse fewer factors)")
    out: dict[str, ResponseResult] = {}
    for r in responses:
        out[r] = _analyse_one(data, r, factors, typ, block)
    _adjust(out, ADJUST[adjust], skip={"Residual", block})
    return out


def _analyse_one(data: pd.DataFrame, r: str, factors: list[str], typ: int | None,
                 block: str | None) -> ResponseResult:
    """One response on the runs that hold it (the others are named in its notes)."""
    missing = without_value(data, r)
    notes = [f"{len(missing)} run(s) without a value, left out of this response: {', '.join(missing)}"
             ] if missing else []
    rows = with_value(data, r)
    check_design(rows, r, factors)
    balanced = is_balanced(rows, factors, None)
    use_typ = typ or (2 if balanced else 3)
    if not balanced:
        notes.append("unbalanced design (unequal runs per cell): Type III sums of squares with effect coding")
    table, fit = anova_with_fit(rows, r, factors, typ=use_typ, block=block)
    if fit.dropped:
        notes.append("not estimable here: " + ", ".join(fit.dropped))
    two_level = all(rows[f].dropna().nunique() == 2 for f in factors)
    kept = [t for t in table.index if t not in ("Residual", block)]
    eff, used = effects_with_levels(rows, r, factors, terms=kept, block=block) if two_level else (None, {})
    return ResponseResult(r, table, eff, use_typ, balanced, notes, fit=fit, levels=used)


def _adjust(results: dict[str, ResponseResult], method: str | None, skip: set) -> None:
    """Adjust the p-values of every factorial term of every response as one family (the
    block is a nuisance term, not a hypothesis, and stays out of it)."""
    keys, ps = [], []
    for r, res in results.items():
        res.block = next((t for t in skip if t and t != "Residual" and t in res.anova.index), None)
        for term, p in res.anova["p"].items():
            if term not in skip and np.isfinite(p):
                keys.append((r, term))
                ps.append(p)
    adj = multipletests(ps, method=method)[1] if (method and ps) else np.asarray(ps)
    for (r, term), p in zip(keys, adj):
        results[r].anova.loc[term, "p_adj"] = p
        eff = results[r].effects
        if eff is not None and term in eff.index:
            eff.loc[term, "p_adj"] = p


def dunnett_vs_control(df: pd.DataFrame, response: str, control: str, arm_column: str = "cell") -> pd.DataFrame:
    """Every arm against the control arm (Dunnett's many-to-one test, scipy): difference
    of means, its 95% confidence interval and the adjusted p-value."""
    if arm_column not in df.columns:
        raise AnalysisError(f"no {arm_column!r} column to find arms in")
    groups = {a: pd.to_numeric(g[response]).to_numpy() for a, g in df.groupby(arm_column, observed=True)}
    if control not in groups:
        raise AnalysisError(f"control arm {control!r} not found (arms: {', '.join(map(str, groups))})")
    arms = [a for a in groups if a != control]
    if not arms:
        raise AnalysisError("no arm besides the control")
    if any(len(groups[a]) < 2 for a in groups):
        raise AnalysisError("Dunnett needs at least two runs per arm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.dunnett(*[groups[a] for a in arms], control=groups[control], random_state=0)  # reproducible p
    ci = res.confidence_interval()
    return pd.DataFrame({"arm": arms, "diff": [groups[a].mean() - groups[control].mean() for a in arms],
                         "ci_low": ci.low, "ci_high": ci.high, "statistic": res.statistic,
                         "p": res.pvalue}).set_index("arm")


def control_contrast(df: pd.DataFrame, response: str, control: str, block: str | None = "replicate",
                     alpha: float = 0.05) -> dict:
    """Every factorial arm pooled against the control arm: the mean difference (factorial
    minus control), its CI and p from the cell-means OLS with the replicate as a block and HC2 errors
    (`analysis.model.control_contrast`), and the difference relative to the control
    mean. With a pure-CE control in the backbone stage this is "what the aux head costs or
    buys", whatever its D1/D2/D9 levels."""
    c = contrast(df, response, control, block)
    half = stats.t.ppf(1 - alpha / 2, c.df) * c.se
    arm = df["arm"].astype(str) if "arm" in df.columns else pd.Series("factorial", index=df.index)
    base = float(pd.to_numeric(df.loc[df["cell"] == control, response]).mean())
    return {"diff": c.estimate, "ci_low": c.estimate - half, "ci_high": c.estimate + half,
            "p": float(2 * stats.t.sf(abs(c.estimate / c.se), c.df)),
            "rel": c.estimate / base if base else float("nan"), "control_mean": base,
            "n_factorial": int((arm == "factorial").sum()), "n_control": int((df["cell"] == control).sum()),
            "errors": c.errors}
