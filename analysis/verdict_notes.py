"""What a verdict is read with: the words beside an interval that says little (a term whose
levels changed nothing, too few blocks, an interval many margins wide), a response's noise
split and caveats, and its check (residual sigma with its interval, the blocks a margin
needs)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

from trials.registry import Registry

from . import power, variance
from .model import Fit
from .decision import Decision
from .result_types import DECISION_POWER, MIN_DF, UNDECIDED, WIDE, ResponseCheck, Verdict


POOLED_CAVEAT = ("its terms are judged against the pooled residual (the plan declares block_errors: pooled): a seed "
                 "that favours one arm is not in their errors, so their intervals may be too narrow")


def sigma_interval(sigma: float, df: float, level: float = 0.95) -> tuple[float, float]:
    a = 1 - level
    return (float(sigma * math.sqrt(df / stats.chi2.ppf(1 - a / 2, df))),
            float(sigma * math.sqrt(df / stats.chi2.ppf(a / 2, df))))


IDENTICAL = 1e-7  # an effect and its se both below this share of the response's scale: its levels changed nothing
# (a se from sums of squares that cancel keeps ~1e-9 of rounding; no trained response is that sure)


def mark_identical(v: Verdict, scale: float) -> None:
    """A term whose levels gave the same values in every block (its estimate and its own se
    both zero to IDENTICAL of the response's largest value): no test says anything of it, and
    a switch that changed nothing is most likely one the trainer never reads. Said so, not
    called negligible on an interval of 1e-9."""
    if v.decided_at is not None and v.verdict != UNDECIDED or not (scale > 0 and np.isfinite(v.se)):
        return
    if abs(v.estimate) <= IDENTICAL * scale and v.se <= IDENTICAL * scale:
        v.verdict, v.untested, v.identical, v.decided_at = UNDECIDED, True, True, None
        v.next_step = (f"check that the trainer reads what {v.term} sets: a switch it never reaches changes nothing "
                       "(a bug in the trainer, not an effect of zero)")


def say_few(v: Verdict, reps: int) -> None:
    """Why a verdict's interval says little, in words beside it: its error's df below MIN_DF
    (too few blocks for a term's own error), or an interval wider than WIDE margins."""
    if v.identical or v.few:
        return
    lo, hi, _ = v.interval()
    wide = v.margin is not None and hi - lo > WIDE * v.margin
    size = f"; its interval {hi - lo:.3g} wide" + (f" ({(hi - lo) / v.margin:.0f} margins)" if v.margin else "")
    if v.untested and v.df < MIN_DF:
        v.few = f"its own error has {v.df:.2g} df from {reps} block(s): too few blocks to judge it{size}"
    elif v.untested:
        v.few = (f"too few blocks to judge it: the plan's looks test from {MIN_DF + 1} blocks on (a two-level term's "
                 f"own error on {MIN_DF} df), this one has {reps}{size}")
    elif wide:
        v.few = f"its interval is {(hi - lo) / v.margin:.0f} margins wide ({v.df:.3g} df, {v.errors} errors)"
    if v.few and v.verdict == UNDECIDED and not v.next_step:
        v.next_step = "the blocks that would decide it are not priced (no replicate blocks or no plan for it)"


def noise_and_caveats(decision: Decision, r: str, rows: pd.DataFrame, model: variance.Model,
                       rules: Registry, pooled: bool = False) -> None:
    """A response's noise split (with its family terms' items x term parts) and the caveats
    its verdicts must be read with (a ratio below its break-even in every arm)."""
    means = rows.groupby("cell", observed=True)[r].mean() if "cell" in rows.columns else rows[r]
    if (below := rules.below_break_even(r, list(pd.to_numeric(means)))) is not None:
        decision.caveats.setdefault(r, []).append(below)
    if pooled:  # the plan declared block_errors: pooled
        decision.caveats.setdefault(r, []).append(POOLED_CAVEAT)
    own = {v.term: v.noise for v in decision.of(r) if v.in_family and v.noise is not None}
    if (sp := variance.split_of(model, None, own)) is not None:
        decision.noise[r] = sp


def response_scale(values) -> float:
    """A response's scale for `mark_identical`: its largest absolute value (0 where it has none)."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(float)
    return float(np.nanmax(np.abs(v))) if len(v) and np.isfinite(v).any() else 0.0


def response_check(r: str, fit: Fit, better: str, margin: float | None, primary: bool, n_cells: int, reps: int,
           alpha_star: float) -> ResponseCheck:
    res = fit.result
    sigma = float(np.sqrt(res.mse_resid))
    lo, hi = sigma_interval(sigma, res.df_resid)
    need = None
    if margin is not None and reps >= 2 and n_cells >= 2:
        need = tuple(blocks_needed(margin, s, n_cells, alpha_star) for s in (lo, sigma, hi))
    return ResponseCheck(r, better, margin, primary, int(res.nobs), float(res.df_resid), sigma, lo, hi,
                         float(res.rsquared), float(res.rsquared_adj), fit.errors, n_cells, reps, need)


def blocks_needed(effect: float, sigma: float, n_cells: int, alpha: float) -> int | None:
    try:
        return power.replicates_needed(effect, sigma, n_cells, alpha, DECISION_POWER)
    except ValueError:
        return None
