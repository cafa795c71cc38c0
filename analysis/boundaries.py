"""Exact group-sequential boundaries: the nominal level each look of one hypothesis tests at,
from the joint distribution of its statistics across looks.

A hypothesis tested at looks 1..K with information fractions t_1 < ... < t_K (its own
information reached over the plan's maximum) has z statistics Z_k whose B-values
B_k = Z_k sqrt(t_k) move like a Brownian motion: independent increments, Var B_k = t_k, so
Corr(Z_j, Z_k) = sqrt(t_j / t_k) (the canonical joint distribution; Jennison & Turnbull
2000, ch. 3). Alpha is spent by the Lan-DeMets Pocock-type function (Lan & DeMets 1983;
Kim & DeMets 1987)

    spent(t) = alpha * ln(1 + (e - 1) t),

and look k's boundary c_k solves

    P(|Z_1| < c_1, ..., |Z_{k-1}| < c_{k-1}, |Z_k| >= c_k) = spent(t_k) - spent(t_{k-1})

(one-sided: Z_j < c_j, Z_k >= c_k). The recursion integrates B's sub-density over the
continuation region numerically (Armitage, McPherson & Rowe 1969; Jennison & Turnbull
ch. 19): on a grid with Simpson's weights, each look's density is the previous one
convolved with the increment's normal kernel. The nominal level of look k is the tail
probability of c_k alone: 2 (1 - Phi(c_k)) two-sided. It exceeds the increment of alpha,
since a path that crosses at look k has mostly not crossed before: the union bound over
increments, which tests at the increment itself, spends the same alpha less well.

Boundaries are binding for the error they control: a hypothesis stopped earlier for another
reason (shown negligible) can only lose chances to be rejected wrongly, so the rate stays at
or below the spent alpha.

The looks compute t statistics, on few df where a term is judged on its own block x term
error (b - 1 df at b blocks). Applying the normal boundary's nominal level to such a t spends
more than alpha (1.04-1.09x at 3-5 df over a few looks, 1.11-1.17x over ten), since heavy
tails and a shared variance estimate are not in the normal recursion. `t_levels` calibrates
the boundaries to the t statistics themselves by simulation (PATHS paths of the Brownian
B-values and independent chi-square increments of the variance estimate, from a seed fixed
by the arguments; the first look's level is exact), and reads each look's nominal level off
the t distribution on that look's df.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

MIN_STEP = 1e-4  # information fractions closer than this are one look's (nothing new to test)
TAIL = 10.0  # a one-sided continuation region is cut this many sd below zero (mass ~1e-23)


def spent(t: float, alpha: float) -> float:
    """The alpha spent by information fraction t (0 <= t <= 1), Pocock-type."""
    if not 0 <= t <= 1:
        raise ValueError(f"information fraction must lie in [0, 1], got {t!r}")
    return alpha * math.log(1 + (math.e - 1) * t)


def _simpson(n: int) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w / 3.0


def _grid(lo: float, hi: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """An odd-sized grid on [lo, hi] at most `step` apart, and its Simpson weights (h folded in)."""
    n = max(101, int(math.ceil((hi - lo) / step)) + 1)
    n += (n % 2 == 0)
    g = np.linspace(lo, hi, n)
    return g, _simpson(n) * (g[1] - g[0])


def _crossing(grid: np.ndarray, mass: np.ndarray, c: float, t: float, s: float, sides: int) -> float:
    """P(not crossed before, crosses at this look with boundary c): `mass` is the previous
    look's sub-density times its quadrature weights, s the increment's sd."""
    from scipy.special import ndtr  # scipy where boundaries are computed: a plan's record reads without it

    b = c * math.sqrt(t)
    p = float(mass @ ndtr((grid - b) / s))  # P(N > (b - g) / s), without scipy.stats' overhead
    if sides == 2:
        p += float(mass @ ndtr((-b - grid) / s))
    return p


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@lru_cache(maxsize=4096)
def _levels(ts: tuple[float, ...], alpha: float, sides: int) -> tuple[float, ...]:
    from scipy import optimize
    from scipy.stats import norm

    out, grid, mass, t_prev, spent_prev = [], None, None, 0.0, 0.0
    for k, t in enumerate(ts):
        a = spent(t, alpha) - spent_prev
        spent_prev = spent(t, alpha)
        if grid is None:
            c = float(norm.isf(a / sides))
        else:
            s = math.sqrt(t - t_prev)
            total = _crossing(grid, mass, 0.0, t, s, sides)
            if a >= total:  # everything left crosses: the boundary is 0
                c = 0.0
            else:
                c = float(optimize.brentq(lambda x: _crossing(grid, mass, x, t, s, sides) - a, 0.0, 40.0,
                                          xtol=1e-10, rtol=1e-12))
        out.append(min(1.0, sides * float(norm.sf(c))))
        if k == len(ts) - 1:
            break
        # the continuation region's sub-density at this look, on its own grid
        hi = c * math.sqrt(t)
        lo = -hi if sides == 2 else -TAIL * math.sqrt(t)
        nxt = ts[k + 1]
        step = min(math.sqrt(t) / 60.0, math.sqrt(nxt - t) / 6.0)
        new, w = _grid(lo, hi, step)
        if grid is None:
            dens = _pdf(new / math.sqrt(t)) / math.sqrt(t)
        else:
            s = math.sqrt(t - t_prev)
            dens = np.empty_like(new)
            for i in range(0, len(new), 512):  # in chunks: never an n x n matrix of several GB
                chunk = new[i:i + 512]
                dens[i:i + 512] = (_pdf((chunk[:, None] - grid[None, :]) / s) / s) @ mass
        grid, mass, t_prev = new, dens * w, t
    return tuple(out)


def nominal_levels(ts: list[float], alpha: float, sides: int = 2) -> list[float]:
    """The nominal level of each look of one hypothesis (two-sided p-value threshold where
    `sides` is 2, one-sided where 1), at information fractions `ts` (strictly increasing by
    at least MIN_STEP, in (0, 1]) and total alpha `alpha` spent at t = 1."""
    if sides not in (1, 2):
        raise ValueError(f"sides: 1 or 2, got {sides!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha!r}")
    ts = tuple(float(t) for t in ts)
    if not ts:
        return []
    if not all(0 < t <= 1 for t in ts) or any(b - a < MIN_STEP for a, b in zip(ts, ts[1:])):
        raise ValueError(f"information fractions must increase by at least {MIN_STEP:g} within (0, 1], got "
                         f"{[round(t, 6) for t in ts]}")
    # rounded, so that the same looks read from a record hit the cache
    return list(_levels(tuple(round(t, 9) for t in ts), float(alpha), sides))


# ---------------------------------------------------------------- t statistics on few df

PATHS = 1 << 20  # simulated looks per calibration: the spent alpha's Monte Carlo error is ~1-3% of it
DF_CAP = 1e6  # df at or above this are normal: their statistic is Z


def _seed(key) -> int:
    import hashlib

    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little")


@lru_cache(maxsize=1024)
def _t_boundaries(ts: tuple[float, ...], dfs: tuple[float, ...], alpha: float, sides: int) -> tuple[float, ...]:
    """The boundaries c_1..c_K, in t units, that spend alpha as `_levels` does, for the t
    statistics T_k = Z_k / S_k the looks compute: Z as in the module docstring, and
    nu_k S_k^2 = V_k a sum of independent chi-square increments of nu_k - nu_{k-1} df,
    independent of the Z path (a block, or a run, adds a recursive residual orthogonal to the
    estimates and to the residuals before it: Helmert's decomposition). Simulated, PATHS paths
    from a seed fixed by the arguments, so that a report rebuilds to the same levels."""
    rng = np.random.default_rng(_seed((ts, dfs, alpha, sides)))
    n, k = PATHS, len(ts)
    inc = np.sqrt(np.diff((0.0,) + ts))
    b = np.cumsum(rng.standard_normal((k, n)) * inc[:, None], axis=0)  # (K, N): B-values
    z = b / np.sqrt(np.asarray(ts))[:, None]
    t = np.empty_like(z)
    v, nu_prev = np.zeros(n), 0.0
    for j, nu in enumerate(dfs):
        if nu >= DF_CAP:
            t[j] = z[j]
            continue
        grow = nu - nu_prev
        if grow > 1e-9:
            v += 2.0 * rng.standard_gamma(grow / 2.0, n)
            nu_prev = nu
        t[j] = z[j] / np.sqrt(v / nu_prev)
    stat = np.abs(t) if sides == 2 else t
    alive = np.ones(n, bool)
    out, spent_prev = [], 0.0
    for j, tk in enumerate(ts):
        a = spent(tk, alpha) - spent_prev
        spent_prev = spent(tk, alpha)
        hits = int(round(a * n))
        s = stat[j][alive]
        if j == 0:  # the first look's statistic is a t (or Z) alone: its exact quantile
            from scipy.stats import norm, t as student

            c = float(norm.isf(a / sides) if dfs[0] >= DF_CAP else student.isf(a / sides, dfs[0]))
        elif hits >= len(s):
            c = 0.0
        elif hits <= 0:
            c = float("inf")
        else:
            # the (hits)-th largest statistic among the paths not yet stopped: P(first crossing here) = a
            top = np.partition(s, len(s) - hits)[len(s) - hits:]
            below = np.partition(s, len(s) - hits - 1)[len(s) - hits - 1]
            c = float(0.5 * (top.min() + below))
        out.append(c)
        alive &= ~(stat[j] >= c)
    return tuple(out)


def t_levels(ts: list[float], dfs: list[float], alpha: float, sides: int = 2) -> list[float]:
    """The nominal levels of each look of one hypothesis tested by t statistics on `dfs`
    degrees of freedom at information fractions `ts`: the level whose t quantile on that
    look's own df is the calibrated boundary (`_t_boundaries`), so that a t test at it crosses
    where the group-sequential boundary for t statistics lies. The df that calibrate are
    floored to whole numbers (fewer df: heavier tails, a larger boundary: never more than the
    spent alpha) and shared by the cache; the level is read off at the df given."""
    from scipy.stats import t as student

    if len(dfs) != len(ts):
        raise ValueError(f"one df per look: {len(ts)} looks, {len(dfs)} df")
    if not all(math.isfinite(d) and d >= 1 for d in dfs):
        raise ValueError(f"df: each >= 1, got {list(dfs)}")
    nominal_levels(ts, alpha, sides)  # the fractions' and alpha's checks
    if not ts:
        return []
    floor = tuple(float(min(math.floor(d + 1e-9), DF_CAP)) for d in dfs)
    floor = tuple(max(floor[:i + 1]) for i in range(len(floor)))  # df never shrink as data grow
    if floor[0] >= DF_CAP:  # normal statistics: the exact recursion
        return nominal_levels(ts, alpha, sides)
    cs = _t_boundaries(tuple(round(float(t), 9) for t in ts), floor, float(alpha), sides)
    first = min(1.0, spent(round(float(ts[0]), 9), alpha))  # exact at any df: the first look spends its increment
    return [first] + [min(1.0, sides * float(student.sf(c, min(d, DF_CAP)))) if math.isfinite(c) else 0.0
            for c, d in zip(cs[1:], dfs[1:])]
