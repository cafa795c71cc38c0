"""bench/error_rates.py at its smallest: the product's look chain on simulated studies, every
false rejection of zero counted (the full run's table is results/bench/error_rates.txt)."""

import importlib.util
from pathlib import Path

import numpy as np

spec = importlib.util.spec_from_file_location("error_rates", Path(__file__).parents[1] / "bench" / "error_rates.py")
error_rates = importlib.util.module_from_spec(spec)
spec.loader.exec_module(error_rates)


def test_the_half_fraction_is_the_product_of_its_generator():
    codes = error_rates.cells("ABCDE", "E=ABCD")
    assert codes.shape == (16, 5) and (codes[:, 4] == codes[:, :4].prod(axis=1)).all()
    assert len({tuple(c) for c in codes}) == 16


def test_a_small_run_of_the_bench_keeps_false_rejections_down_and_shows_negligible():
    rows = list(error_rates.rows(16, 0, designs=["2^3 in 4"], scenarios=["no interaction"], pooled=False))
    assert len(rows) == 1
    design, scenario, rule, fwer, mc, power = rows[0]
    assert (design, scenario, rule) == ("2^3 in 4", "no interaction", "own")
    assert fwer <= 0.25 and mc > 0  # 0.05 expected; a chain that tested at alpha each look would show far more
    assert power > 0  # a true zero is shown negligible in some studies at 4 blocks


def test_a_look_with_too_few_blocks_decides_nothing():
    """The 2^3 in 3 plan never reaches a term's own error on 3 df: no study decides anything."""
    rng = np.random.default_rng(1)
    out = [error_rates.run_plan(rng, "2^3 in 3", error_rates.SCENARIOS["block x term sigma on A"]) for _ in range(4)]
    assert out == [(False, 0.0)] * 4
