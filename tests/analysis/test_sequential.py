"""The stopping rule across looks (`analysis.sequential`), shown by simulation from the
model's own arithmetic with the paper study's sigmas (no training): a balanced 2^3 with the
replicate as a block, one block added per look until every primary term is decided or the
maximum is reached, decided each look by `analysis.verdicts.classify` at the look's alpha."""

import itertools
import math

import numpy as np
import pytest

from analysis.sequential import Plan, spent
from analysis.verdicts import classify

ALPHA = 0.05
# the paper study's primary responses: residual sigma and margin (results/paper-drafter)
RESPONSES = {"spec/tau": (0.0731, 0.1), "spec/speedup": (0.042, 0.05), "conf/ece_mean": (0.00359, 0.01)}
CODES = np.array([[np.prod(c) for c in itertools.chain.from_iterable(
    itertools.combinations(x, k) for k in (1, 2, 3))] for x in itertools.product((-1.0, 1.0), repeat=3)])  # (8, 7)


def simulate(true_effect, n_sweeps=2000, first=2, max_replicates=8, spend=True, seed=0):
    """Per simulated sweep: whether any term ever ended "matters" and whether any ever
    ended "negligible", over all looks (every term of every response has effect
    `true_effect` margins)."""
    rng = np.random.default_rng(seed)
    plan_alphas = {}
    any_matters = np.zeros(n_sweeps, bool)
    any_negligible = np.zeros(n_sweeps, bool)
    m = 7 * len(RESPONSES)
    # data: (sweep, response, block, cell); effects (high minus low) enter as half the coded contrast
    ys = {}
    for name, (sigma, margin) in RESPONSES.items():
        mean = CODES @ np.full(7, true_effect * margin / 2)  # (8,)
        ys[name] = mean + rng.normal(0, sigma, (n_sweeps, max_replicates, 8))
    active = np.ones(n_sweeps, bool)
    plan = Plan(max_replicates, ALPHA)
    for n in range(first, max_replicates + 1):
        look_alpha = plan.look(n) if spend else ALPHA
        plan_alphas[n] = look_alpha
        alpha_star = look_alpha / m
        decided = np.ones(n_sweeps, bool)
        for name, (sigma, margin) in RESPONSES.items():
            y = ys[name][:, :n, :]  # (S, n, 8)
            cell = y.mean(axis=1)  # (S, 8)
            resid = y - cell[:, None, :] - y.mean(axis=2, keepdims=True) + y.mean(axis=(1, 2))[:, None, None]
            df = 7 * (n - 1)
            s = np.sqrt((resid ** 2).sum(axis=(1, 2)) / df)  # (S,)
            est = cell @ CODES / 4.0  # (S, 7): mean(+) - mean(-)
            se = (s * math.sqrt(0.5 / n))[:, None]
            v = classify(est, se, df, alpha_star, margin)
            any_matters |= active & (v == "matters").any(axis=1)
            any_negligible |= active & (v == "negligible").any(axis=1)
            decided &= (v != "undecided").all(axis=1)
        active &= ~decided  # a decided sweep stops
    return any_matters.mean(), any_negligible.mean(), plan_alphas


def test_spending_adds_up_to_alpha_and_spends_a_look_once():
    assert spent(0, ALPHA) == 0 and spent(1, ALPHA) == pytest.approx(ALPHA)
    plan = Plan(10, ALPHA)
    a = [plan.look(n) for n in (2, 3, 3, 5, 10)]
    assert plan.looks == [2, 3, 5, 10] and a[1] == a[2]  # the same look again spends nothing more
    assert sum(plan.alpha_at(k) for k in range(4)) == pytest.approx(ALPHA)
    assert Plan.from_json(plan.to_json()).looks == plan.looks
    with pytest.raises(ValueError, match="exceed"):
        plan.look(11)
    with pytest.raises(ValueError, match="comes after"):
        plan.look(4)


def test_no_effect_gives_a_false_matters_in_at_most_1_1_alpha_of_sweeps():
    rate, _, alphas = simulate(true_effect=0.0)
    assert rate <= 1.1 * ALPHA, rate
    assert len(alphas) == 7 and sum(alphas.values()) <= ALPHA + 1e-12


def test_an_effect_of_exactly_the_margin_gives_a_false_negligible_in_at_most_1_1_alpha():
    _, rate, _ = simulate(true_effect=1.0, seed=1)
    assert rate <= 1.1 * ALPHA, rate


def test_without_spending_the_same_looks_inflate_false_verdicts():
    """The check has teeth: testing every look at the full alpha breaks the bound."""
    naive, _, _ = simulate(true_effect=0.0, spend=False, seed=2)
    assert naive > 1.1 * ALPHA, naive
    _, naive_negligible, _ = simulate(true_effect=1.0, spend=False, seed=2)
    assert naive_negligible > 1.1 * ALPHA, naive_negligible
