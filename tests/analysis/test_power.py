"""analysis.power against scipy's noncentral t and against a Monte Carlo simulation of
the fitted model (full factorial, replicate as block, the effects estimator)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.effects import factorial_effects
from analysis.power import detectable_effect, power, replicates_needed


def nct_power(effect, sigma, n_cells, replicates, alpha=0.05):
    df = (n_cells - 1) * (replicates - 1)
    nc = effect / (2 * sigma / np.sqrt(n_cells * replicates))
    t = stats.t.ppf(1 - alpha / 2, df)
    return 1 - stats.nct.cdf(t, df, nc) + stats.nct.cdf(-t, df, nc)


@pytest.mark.parametrize("effect,sigma,n_cells,replicates,alpha", [
    (0.1, 0.1, 8, 2, 0.05), (0.05, 0.1, 8, 3, 0.05), (0.3, 0.2, 4, 5, 0.01), (-0.1, 0.1, 8, 2, 0.05),
    (0.0, 1.0, 8, 4, 0.05), (0.02, 0.01, 12, 3, 0.1)])
def test_power_is_the_noncentral_t(effect, sigma, n_cells, replicates, alpha):
    assert power(effect, sigma, n_cells, replicates, alpha) == pytest.approx(
        nct_power(abs(effect), sigma, n_cells, replicates, alpha), rel=1e-9, abs=1e-12)


def test_power_at_zero_effect_is_alpha():
    assert power(0.0, 1.0, 8, 3, 0.05) == pytest.approx(0.05, abs=1e-9)


def test_detectable_effect_inverts_power():
    for n_cells, reps in ((8, 2), (8, 3), (12, 3), (4, 10)):
        d = detectable_effect(0.1, n_cells, reps)
        assert power(d, 0.1, n_cells, reps) == pytest.approx(0.8, abs=1e-9)
        assert power(0.99 * d, 0.1, n_cells, reps) < 0.8
    # scales with sigma, shrinks with replicates
    assert detectable_effect(0.2, 8, 3) == pytest.approx(2 * detectable_effect(0.1, 8, 3))
    assert detectable_effect(0.1, 8, 6) < detectable_effect(0.1, 8, 3)


def test_replicates_needed_is_the_smallest_with_enough_power():
    for effect, sigma, n_cells in ((0.1, 0.1, 8), (0.05, 0.1, 8), (0.02, 0.1, 12), (1.0, 0.1, 4)):
        r = replicates_needed(effect, sigma, n_cells)
        assert r >= 2
        assert power(effect, sigma, n_cells, r) >= 0.8
        if r > 2:
            assert power(effect, sigma, n_cells, r - 1) < 0.8
    assert replicates_needed(1.0, 0.1, 4) == 2  # a huge effect needs the minimum


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="sigma"):
        power(0.1, 0.0, 8, 2)
    with pytest.raises(ValueError, match="replicates"):
        power(0.1, 0.1, 8, 1)
    with pytest.raises(ValueError, match="n_cells"):
        detectable_effect(0.1, 1, 3)
    with pytest.raises(ValueError, match="effect"):
        replicates_needed(0.0, 0.1, 8)


def test_power_matches_a_simulation_of_the_fitted_model():
    """Simulate a 2^3 design with 3 replicates (blocks with their own offsets), a true main
    effect on A, fit the blocked effects model, and count two-sided rejections."""
    rng = np.random.default_rng(7)
    sigma, reps, effect = 1.0, 3, 1.2
    cells = list(itertools.product(["lo", "hi"], repeat=3))
    rows = []
    for r in range(reps):
        for a, b, c in cells:
            rows.append({"A": a, "B": b, "C": c, "replicate": r})
    base = pd.DataFrame(rows)
    for f in "ABC":
        base[f] = pd.Categorical(base[f], categories=["lo", "hi"], ordered=True)
    code_a = np.where(base["A"] == "hi", 0.5, -0.5)
    n_sim, hits = 400, 0
    for _ in range(n_sim):
        block = rng.normal(0, 2.0, reps)[base["replicate"]]
        y = effect * code_a + block + rng.normal(0, sigma, len(base))
        df = base.assign(y=y)
        eff = factorial_effects(df, "y", ["A", "B", "C"], block="replicate")
        hits += eff.loc["A", "p"] < 0.05
    expected = power(effect, sigma, 8, reps)
    se = np.sqrt(expected * (1 - expected) / n_sim)
    assert abs(hits / n_sim - expected) < 3.5 * se
    assert eff.loc["A", "df_resid"] == (8 - 1) * (reps - 1)


def test_t_detectable_inverts_t_power_at_every_scale():
    """One root per (df, alpha, power), scaled by the standard error: exact at any se."""
    from analysis.power import t_detectable, t_power

    for se in (1e-6, 0.003, 0.2, 7.0, 1e4):
        for df, alpha in ((3, 0.05), (21, 0.000398), (200, 0.01)):
            d = t_detectable(se, df, alpha)
            assert t_power(d, se, df, alpha) == pytest.approx(0.8, abs=1e-9)
            assert t_power(0.999 * d, se, df, alpha) < 0.8
