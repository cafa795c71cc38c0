"""Exact group-sequential boundaries (analysis.boundaries) against published values, a
simulation of the canonical joint distribution, and scipy's multivariate normal."""

import numpy as np
import pytest
from scipy import stats

from analysis.boundaries import nominal_levels, spent


def test_pocock_type_spending_matches_the_published_boundaries():
    """Lan-DeMets Pocock-type spending, 5 equally spaced looks, two-sided alpha 0.05: the
    boundaries 2.438, 2.427, 2.410, 2.397, 2.386 (Jennison & Turnbull 2000, table 7.6; the
    R package ldbounds gives the same)."""
    levels = nominal_levels([0.2, 0.4, 0.6, 0.8, 1.0], 0.05, 2)
    z = [stats.norm.isf(a / 2) for a in levels]
    assert z == pytest.approx([2.438, 2.427, 2.410, 2.397, 2.386], abs=1.5e-3)
    # one-sided at alpha / 2 is the same boundary (crossing both sides is negligible here)
    one = [stats.norm.isf(a) for a in nominal_levels([0.2, 0.4, 0.6, 0.8, 1.0], 0.025, 1)]
    assert one == pytest.approx(z, abs=2e-3)


def test_two_looks_spend_exactly_their_alpha_by_the_multivariate_normal():
    """P(|Z1| >= c1 or |Z2| >= c2) = spent(t2), Corr(Z1, Z2) = sqrt(t1 / t2), computed by
    scipy's multivariate normal CDF: an independent reference for the recursion."""
    t1, t2, alpha = 0.35, 0.8, 0.05
    a1, a2 = nominal_levels([t1, t2], alpha, 2)
    c1, c2 = stats.norm.isf(a1 / 2), stats.norm.isf(a2 / 2)
    r = np.sqrt(t1 / t2)
    inside = stats.multivariate_normal([0, 0], [[1, r], [r, 1]]).cdf([c1, c2], lower_limit=[-c1, -c2])
    assert 1 - inside == pytest.approx(spent(t2, alpha), rel=2e-3)
    assert a1 == pytest.approx(spent(t1, alpha), rel=1e-9)  # the first look spends its increment


def test_the_boundaries_hold_the_rate_and_beat_the_union_bound():
    """Brownian paths at uneven looks: the chance of any crossing is the spent alpha (within
    Monte Carlo error), and each later look's nominal level exceeds its increment, which is
    what the union bound tested at."""
    ts = np.array([0.15, 0.3, 0.5, 0.55, 0.8, 1.0])
    rng = np.random.default_rng(0)
    n = 200_000
    z = (rng.normal(size=(n, len(ts))) * np.sqrt(np.diff(np.r_[0, ts]))).cumsum(axis=1) / np.sqrt(ts)
    for alpha, sides in ((0.05, 2), (0.01, 1)):
        levels = np.array(nominal_levels(list(ts), alpha, sides))
        c = stats.norm.isf(levels / sides)
        hit = ((np.abs(z) if sides == 2 else z) >= c).any(axis=1).mean()
        assert abs(hit - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / n), (alpha, sides, hit)
        increments = np.diff([0.0] + [spent(t, alpha) for t in ts])
        assert (levels[1:] > increments[1:] * 1.05).all()


def test_seed_questions_final_level_is_the_exact_one():
    """seed-questions' plan (8 looks at 3..10 of 10 blocks, 14 hypotheses): the union bound
    tested its last look at 0.000233 a hypothesis; the exact boundary is 0.00068."""
    ts = [b / 10 for b in range(3, 11)]
    assert nominal_levels(ts, 0.05 / 14, 2)[-1] == pytest.approx(0.00068, rel=0.01)
    assert (spent(1.0, 0.05) - spent(0.9, 0.05)) / 14 == pytest.approx(0.000233, rel=0.01)


def test_bad_fractions_are_refused():
    with pytest.raises(ValueError, match="increase by at least"):
        nominal_levels([0.5, 0.5], 0.05)
    with pytest.raises(ValueError, match="within \\(0, 1\\]"):
        nominal_levels([0.5, 1.2], 0.05)
    with pytest.raises(ValueError, match="alpha"):
        nominal_levels([0.5], 1.5)
