"""What the report computes beside the verdicts: which responses to analyse, the model's
fit (S, R², adjusted R²) and residuals, the drift check, what the sweep could detect, cell
means, the pooled comparison with a control arm and the fraction's note. Statistics only:
no plotting and no store, so `analysis plan` loads neither matplotlib nor a renderer."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from trials.registry import Registry
from trials.registry import UNKNOWN

from . import power
from .anova import AnalysisError, check_design
from .attribution import control_contrast, dunnett_vs_control, stage_of
from .report_types import ResponseResult
from .coded_design import alias_structure, design_matrix, factorial_rows, with_value
from .sweep_reader import responses as metric_columns


POWER = 0.8


DRIFT_ALPHA = 0.01  # a check run on every response: flag only clear trends


@dataclass
class Sensitivity:
    """What a response's sweep could detect: residual sigma and detectable effects."""
    sigma: float
    n_cells: int
    replicates: int
    detectable: float  # a two-level main effect (high minus low) at 80% power
    by_term: dict[str, float] = field(default_factory=dict)


def choose_responses(df: pd.DataFrame, asked: list[str] | None, factors: list[str],
                     primary: list[str] | None = None, experiment: str = "",
                     rules: Registry | None = None) -> tuple[list[str], list[str]]:
    """The primary responses (those with a margin) always, first and strictly; then the
    asked ones, checked strictly too (errors surface later); if none is asked, the stage's
    usual responses that exist and vary, the others listed as skipped with the reason.
    Degenerate responses are never analysed: they are listed as skipped. `experiment` names
    the sweep in the commands a refusal suggests; `rules` the swept workload's registry (the
    default workload's where none is given)."""
    rules = rules or UNKNOWN
    stage = stage_of(df, rules)
    primary = list(primary or [])
    for r in primary:
        _check_primary(df, stage, r, experiment, rules)
    if asked:
        asked = list(dict.fromkeys(primary + list(asked)))
    chosen, skipped = list(primary), []
    if asked:
        chosen = []
        for r in asked:
            reason = why_degenerate(df, stage, r, rules)
            if reason:
                skipped.append(f"{r} (not ranked: {reason})")
                continue
            problem = value_problem(df, r)
            if problem:
                raise AnalysisError(f"response {r}: {problem}")
            chosen.append(r)
        if not chosen:
            raise AnalysisError(f"every response asked is degenerate in the {stage} stage: {'; '.join(skipped)}")
        return chosen, skipped
    _defaults(df, stage, factors, chosen, skipped, rules)
    if not chosen:
        raise AnalysisError("no default response varies across runs; name one with --responses")
    return chosen, skipped


def _defaults(df: pd.DataFrame, stage: str | None, factors: list[str], chosen: list[str], skipped: list[str],
              rules: Registry) -> None:
    """The stage's usual responses that exist, hold finite values and vary, appended to
    `chosen`; the others (with their reasons) to `skipped`."""
    have = set(metric_columns(df))
    data = factorial_rows(df, factors)
    degenerate = sorted(c for c in have if rules.degenerate_reason(stage, c))
    if degenerate:  # say so, once, even when nobody asked for them
        shown = ", ".join(degenerate[:4]) + (f" and {len(degenerate) - 4} more" if len(degenerate) > 4 else "")
        skipped.append(f"{shown} (not ranked: {rules.degenerate_reason(stage, degenerate[0])})")
    defaults = rules.metrics.DEFAULT_RESPONSES.get(stage or "") or rules.all_default_responses()
    for r in defaults:
        if r in chosen:
            continue
        if r not in have:  # absent, or a column no run holds a finite value of (said, not analysed)
            problem = value_problem(df, r) if r in df.columns else None
            if problem:
                skipped.append(f"{r} ({problem})")
        elif why_degenerate(df, stage, r, rules):
            skipped.append(f"{r} (not ranked: {why_degenerate(df, stage, r, rules)})")
        elif data[r].nunique() <= 1:
            skipped.append(f"{r} (constant across runs)")
        else:
            chosen.append(r)


def value_problem(df: pd.DataFrame, r: str) -> str | None:
    """Why a response's column cannot be analysed (None when it can): no run holds a value
    of it, or a run holds an infinite one (a store never does; a parquet export may)."""
    if r not in df.columns:
        return None
    values = pd.to_numeric(df[r], errors="coerce").astype(float)
    if values.isna().all():
        return f"column {r!r}: no run holds a value"
    infinite = np.isinf(values.to_numpy())
    if infinite.any():
        i = int(infinite.nonzero()[0][0])
        run = df["run_name"].iloc[i] if "run_name" in df.columns else f"row {i}"
        return (f"column {r!r} holds {int(infinite.sum())} infinite value(s), e.g. {values.iloc[i]:g} in run {run} "
                "(the analysis needs finite numbers)")
    return None


def why_degenerate(df: pd.DataFrame, stage: str | None, r: str, rules: Registry | None = None) -> str | None:
    """Why a response cannot rank these runs: degenerate in their stage by construction, or
    flat on these runs as its row's `degenerate_when` says (its flag column 1 in every run and
    its `same` column one value: a scheduler's throughput where every request of every run
    was given one length ranks the acceptance, not the scheduler)."""
    reason = (rules or UNKNOWN).degenerate_reason(stage, r)
    rule = None if reason else (rules or UNKNOWN).flat_rule(r)
    if rule is None or rule["flag"] not in df.columns or rule["same"] not in df.columns:
        return reason
    flags, same = pd.to_numeric(df[rule["flag"]], errors="coerce"), pd.to_numeric(df[rule["same"]], errors="coerce")
    if (flags == 1).all() and same.nunique() == 1:
        return rule["why"].replace("{same}", f"{same.iloc[0]:g}")
    return None


def _check_primary(df: pd.DataFrame, stage: str | None, r: str, experiment: str, rules: Registry) -> None:
    """A primary response the runs can answer, or one line saying why not (a timed one
    names the timing pass that measures it)."""
    name = experiment or "NAME"
    reason = why_degenerate(df, stage, r, rules)
    if reason:
        raise AnalysisError(f"primary response {r} cannot be ranked in the {stage} stage: {reason}")
    if r not in df.columns and rules.is_timed(r):
        raise AnalysisError(f"primary response {r} is measured by the interleaved timing pass: run "
                            f"`trials time {name}` first")
    if r not in df.columns:
        raise AnalysisError(f"primary response {r} is not among the runs' metrics")
    missing = int(pd.to_numeric(df[r], errors="coerce").isna().sum())
    if missing and rules.is_timed(r):
        raise AnalysisError(f"primary response {r}: {missing} run(s) have no value from the timing pass (a block "
                            f"added after it): run `trials time {name}`, which times the blocks not timed yet")
    problem = value_problem(df, r)
    if problem:
        raise AnalysisError(f"primary response {r}: {problem}")


def _n_levels(data: pd.DataFrame, f: str) -> int:
    return int(data[f].dropna().nunique())


def sensitivity(data: pd.DataFrame, res: ResponseResult, factors: list[str], alpha: float) -> Sensitivity | None:
    """Residual sigma of the fitted model and, from `analysis.power`, the smallest effect
    each term could be detected at with 80% power (None for an unreplicated sweep)."""
    sigma = res.fit.s if res.fit is not None else float("nan")
    n_cells = int(data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups)
    reps = int(data["replicate"].nunique()) if "replicate" in data.columns else 1
    if reps < 2 or not (np.isfinite(sigma) and sigma > 0) or n_cells < 2:
        return None
    base = power.detectable_effect(sigma, n_cells, reps, alpha, POWER)
    by_term = {}
    for term in res.anova.index:
        if term in ("Residual", res.block):
            continue
        L = max(_n_levels(data, f) for f in term.split(":"))
        by_term[term] = base if L == 2 else power.detectable_effect(sigma, n_cells, reps, alpha, POWER, levels=L)
    return Sensitivity(float(sigma), n_cells, reps, float(base), by_term)


def residuals(res: ResponseResult) -> pd.Series:
    return res.fit.resid if res.fit is not None else pd.Series([], dtype=float)


def model_fit_table(results: dict[str, ResponseResult]) -> pd.DataFrame:
    """Per response, how well its model fits: runs, residual df, S (the residual standard
    deviation), R² and adjusted R²."""
    rows = {r: {"n": res.fit.n, "df_resid": res.fit.df_resid, "S": res.fit.s, "R2": res.fit.r2,
                "R2_adj": res.fit.r2_adj} for r, res in results.items() if res.fit is not None}
    return pd.DataFrame.from_dict(rows, orient="index")


def drift_check(data: pd.DataFrame, res: ResponseResult, resid: pd.Series | None = None) -> tuple[float, float] | None:
    """Least-squares slope of the model's residuals on the run order, and its p-value.
    The replicate blocks already absorb drift between blocks, so the order is centred
    inside each block: the slope is the drift left within blocks, which the model does
    not remove and which randomisation turns into noise rather than bias. `resid`: the
    residuals of the model the verdicts used (`analysis.variance.residuals`: with the block x
    term interactions each own error allows for); the ANOVA's where None."""
    if "run_order" not in data.columns:
        return None
    resid = residuals(res) if resid is None else resid
    if len(resid) == 0 or np.allclose(resid.to_numpy(float), 0, atol=1e-12 * max(1.0, float(np.abs(resid).max()))):
        return None  # an exact fit: no residual to drift
    raw = pd.to_numeric(data.loc[resid.index, "run_order"], errors="coerce")
    ok = (raw.notna() & (raw >= 0)).to_numpy()
    order = centred_order(data, res, resid)
    if ok.sum() < 3 or len(np.unique(order[ok])) < 3:
        return None
    fit = stats.linregress(order[ok], resid.to_numpy(float)[ok])
    return float(fit.slope), float(fit.pvalue)


def centred_order(data: pd.DataFrame, res: ResponseResult, resid: pd.Series) -> np.ndarray:
    """Each run's launch position centred within its replicate block (the drift the blocks
    leave), the x of both the drift check and its plot."""
    order = pd.to_numeric(data.loc[resid.index, "run_order"], errors="coerce")
    if res.block and res.block in data.columns:
        order = order - order.groupby(data.loc[resid.index, res.block]).transform("mean")
    return order.to_numpy(float)


def _control_table(df: pd.DataFrame, response: str, control: str) -> pd.DataFrame:
    """Each arm against the control: Dunnett's difference and p. Its intervals are left out:
    the verdicts' level (alpha*) is the one the report prints, and scipy's Dunnett
    interval does not converge that far out."""
    d = dunnett_vs_control(df, response, control).drop(columns=["ci_low", "ci_high"])
    base = pd.to_numeric(df.loc[df["cell"] == control, response]).mean()
    d["diff_pct"] = 100.0 * d["diff"] / base if base else np.nan
    return d


def cell_means(data: pd.DataFrame, response: str, factors: list[str]) -> pd.DataFrame:
    g = data.groupby(factors, observed=True)[response]
    return pd.DataFrame({"n": g.count(), "mean": g.mean(), "sd": g.std()})


def against_control(df: pd.DataFrame, chosen: list[str], controls: list[str],
                     alpha_star: float) -> tuple[dict, dict]:
    """Each arm against the control (Dunnett) and the pooled contrast, per response."""
    dunnett, pooled = {}, {}
    for r in chosen if controls else []:
        try:
            dunnett[r] = _control_table(df, r, controls[0])
            pooled[r] = control_contrast(df, r, controls[0], alpha=alpha_star)
        except AnalysisError:
            pass
    return dunnett, pooled


SEED_DOC = "docs/extending.md, \"What the engine sets\""
SAME = 1e-9  # a within-cell spread this small beside the values' scale is no spread: copies, not replicates


def check_replicates_vary(data: pd.DataFrame, r: str, factors: list[str], primary: bool = True) -> None:
    """Refuse a response whose runs repeat exactly within every cell: its replicate blocks
    are copies, not replicates (a trainer that ignores the seed the engine gives it), and
    any interval would be zero wide and any F negative or infinite. A secondary response may
    be a deterministic function of its config (a count, a shared target's score): it is
    skipped with the fact alone."""
    if "replicate" not in data.columns or data["replicate"].nunique() < 2:
        return
    values = data[r].astype(float)
    cells = values.groupby([data[f].astype(str) for f in factors], observed=True)
    counts = cells.count()
    if not (counts >= 2).any():
        return
    spread = (cells.max() - cells.min())[counts >= 2]
    scale = max(float(values.abs().max()), float(values.std(ddof=0)), 1e-300)
    if float(spread.max()) <= SAME * scale and not primary:
        raise AnalysisError("its runs repeat exactly within every cell: no run-to-run variation to judge effects by")
    if float(spread.max()) <= SAME * scale:
        raise AnalysisError(f"{r}: every cell's runs are identical across its {data['replicate'].nunique()} replicate "
                            "blocks, so the blocks are copies, not replicates, and no effect can be judged; the likely "
                            f"cause: the trainer ignores config.seed, which the engine sets for each block ({SEED_DOC})")


def analysable(data: pd.DataFrame, chosen: list[str], factors: list[str], primary: set[str],
                skipped: list[str]) -> list[str]:
    """The chosen responses that a model can answer on the runs holding them; a secondary one
    that cannot is skipped with its reason (the others still report), a primary one stops
    the report with it."""
    keep, errors = [], []
    for r in chosen:
        try:
            check_design(with_value(data, r), r, factors)
            check_replicates_vary(with_value(data, r), r, factors, r in primary)
        except AnalysisError as e:
            if r in primary:
                raise
            errors.append(e)
            skipped.append(f"{r} ({e})")
            continue
        keep.append(r)
    if not keep:
        raise errors[0] if len(errors) == 1 else AnalysisError("no response can be analysed: " + "; ".join(skipped))
    return keep


def fraction_note(design: str, data: pd.DataFrame, factors: list[str]) -> str:
    """For a fractional design (the sweep record's `design`), the line naming its aliases
    (each verdict is then the sum of a term and its aliases); "" for a full factorial. A
    fraction that lost cells is refused."""
    design = design or "full"
    if design == "full":
        return ""
    cells = data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups
    try:
        k, p = (int(x) for x in design.removeprefix("2^(").removesuffix(")").split("-"))
    except ValueError:
        raise AnalysisError(f"design {design!r}: not 'full' or 2^(k-p)") from None
    if cells < 2 ** (k - p):
        raise AnalysisError(f"fractional design {design}: {cells} of its {2 ** (k - p)} cells have finished runs "
                            "(resume the sweep to rerun the failed trials)")
    lines = alias_structure(design_matrix(data, factors))
    return (f"fractional design {design}: each term's estimate is its sum with its aliases ("
            + "; ".join(lines) + ")")
