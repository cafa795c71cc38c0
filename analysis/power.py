"""Power of a replicated full factorial: can this sweep tell "no effect" from "too few runs"?

The model is the full factorial with the replicate as a block: n_cells cells, each run
once per replicate, N = n_cells * replicates runs. Fitting every cell mean plus a block
effect per replicate leaves

    df = (n_cells - 1) * (replicates - 1)

residual degrees of freedom. A main effect of a two-level factor (mean at the high level
minus mean at the low level) compares two halves of N/2 runs each, so its standard error
is

    se = 2 * sigma / sqrt(n_cells * replicates)

and the two-sided t-test at level alpha rejects when |effect_hat / se| > t_{1-alpha/2, df}.
Under a true effect the statistic follows a noncentral t with df degrees of freedom and
noncentrality effect / se, which gives the power. With `levels` L > 2 the same functions
answer for the difference between two levels of an L-level factor (N/L runs each:
se = sigma * sqrt(2 L / N)); L = 2 is the formula above.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special, stats

MAX_REPLICATES = 100_000


def _check(sigma: float, n_cells: int, alpha: float, levels: int) -> None:
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma: must be a finite number > 0, got {sigma!r}")
    if not (isinstance(n_cells, int) and n_cells >= 2):
        raise ValueError(f"n_cells: must be an integer >= 2, got {n_cells!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha!r}")
    if not (isinstance(levels, int) and 2 <= levels <= n_cells):
        raise ValueError(f"levels: must be an integer in 2..n_cells, got {levels!r}")


def residual_df(n_cells: int, replicates: int) -> int:
    return (n_cells - 1) * (replicates - 1)


def effect_se(sigma: float, n_cells: int, replicates: int, levels: int = 2) -> float:
    """Standard error of a difference between two levels (the main effect when levels = 2)."""
    return sigma * math.sqrt(2.0 * levels / (n_cells * replicates))


def t_power(effect: float, se: float, df: float, alpha: float) -> float:
    """The power of a two-sided t-test at `alpha` of an estimate with standard error `se`
    and `df` degrees of freedom, when the true value is `effect` (noncentral t)."""
    nc = abs(effect) / se
    tcrit = stats.t.ppf(1 - alpha / 2, df)
    lower = stats.nct.cdf(-tcrit, df, nc)
    if not math.isfinite(lower):  # scipy's nct returns NaN far out in the tail, where it is ~0
        lower = 0.0
    upper = stats.nct.sf(tcrit, df, nc)
    if not math.isfinite(upper):  # the same far out: the whole mass lies on one side of tcrit
        upper = 1.0 if nc > tcrit else 0.0
    return float(min(1.0, upper + lower))


def t_detectable(se: float, df: float, alpha: float, power: float = 0.8) -> float:
    """The smallest true effect that the two-sided t-test at `alpha` rejects with at least
    `power`, for an estimate with standard error `se` and `df` degrees of freedom."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha!r}")
    if not (math.isfinite(se) and se > 0 and df >= 1):
        return float("nan")
    if power <= alpha:
        return 0.0  # even no effect is rejected with probability alpha
    return se * _detectable_in_se(float(df), float(alpha), float(power))


@functools.lru_cache(maxsize=1024)
def _detectable_in_se(df: float, alpha: float, power: float) -> float:
    """`t_detectable` in units of the standard error: the power depends on effect / se
    alone, so one root per (df, alpha, power) serves every contrast that shares them."""
    hi = 1.0
    while t_power(hi, 1.0, df, alpha) < power:
        hi *= 2.0
    return float(optimize.brentq(lambda e: t_power(e, 1.0, df, alpha) - power, 0.0, hi, xtol=1e-12 * hi,
                                 rtol=1e-12))


def power(effect: float, sigma: float, n_cells: int, replicates: int, alpha: float = 0.05,
          levels: int = 2) -> float:
    """The probability that the two-sided t-test at `alpha` rejects "no effect" when the
    true effect is `effect`."""
    _check(sigma, n_cells, alpha, levels)
    if not (isinstance(replicates, int) and replicates >= 2):
        raise ValueError(f"replicates: must be an integer >= 2 (one leaves no residual), got {replicates!r}")
    if not math.isfinite(effect):
        raise ValueError(f"effect: must be finite, got {effect!r}")
    return t_power(effect, effect_se(sigma, n_cells, replicates, levels), residual_df(n_cells, replicates), alpha)


def detectable_effect(sigma: float, n_cells: int, replicates: int, alpha: float = 0.05,
                      power: float = 0.8, levels: int = 2) -> float:
    """The smallest effect (absolute) that the test rejects with at least `power`."""
    target = power
    if not 0 < target < 1:
        raise ValueError(f"power: must lie in (0, 1), got {target!r}")
    _check(sigma, n_cells, alpha, levels)
    return t_detectable(effect_se(sigma, n_cells, replicates, levels), residual_df(n_cells, replicates), alpha, target)


def replicates_needed(effect: float, sigma: float, n_cells: int, alpha: float = 0.05,
                      power: float = 0.8, levels: int = 2) -> int:
    """The smallest number of replicates (at least 2) whose power reaches `power`."""
    target = power
    if not 0 < target < 1:
        raise ValueError(f"power: must lie in (0, 1), got {target!r}")
    if not (math.isfinite(effect) and effect != 0):
        raise ValueError(f"effect: must be a finite non-zero number, got {effect!r}")
    _check(sigma, n_cells, alpha, levels)
    lo, hi = 2, 2
    while _power(effect, sigma, n_cells, hi, alpha, levels) < target:
        lo, hi = hi, hi * 2
        if hi > MAX_REPLICATES:
            raise ValueError(f"effect: {effect!r} needs more than {MAX_REPLICATES} replicates at sigma {sigma!r}")
    while lo < hi:  # power rises with replicates: bisect for the first that reaches the target
        mid = (lo + hi) // 2
        if _power(effect, sigma, n_cells, mid, alpha, levels) >= target:
            hi = mid
        else:
            lo = mid + 1
    return hi


_power = power  # the module-level name, for use inside functions whose argument shadows it


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
