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
or below the spent alpha. The nominal level is applied to the t statistic on the term's own
degrees of freedom, as group-sequential practice does.
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
