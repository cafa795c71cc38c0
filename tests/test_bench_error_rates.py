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
    rows = list(error_rates.rows(16, 0, [("2^3 in 4", "no interaction", "own")]))
    assert len(rows) == 1
    design, scenario, rule, fwer, mc, power = rows[0]
    assert (design, scenario, rule) == ("2^3 in 4", "no interaction", "own")
    assert fwer <= 0.25 and mc > 0  # 0.05 expected; a chain that tested at alpha each look would show far more
    assert power > 0  # a true zero is shown negligible in some studies at 4 blocks


def test_the_committed_rows_are_the_issues_designs_each_with_its_plan():
    """2^3 in 4 and 6, 2^(5-1) in 10 with and without a block x term interaction, two arms at
    12/24 and 65/130 blocks, each with a zero and an at-the-margin scenario."""
    designs = {d for d, _, _ in error_rates.ROWS}
    assert designs == {"2^3 in 4", "2^3 in 6", "2^(5-1) in 10", "two arms 12/24", "two arms 65/130"}
    for d in designs:
        names = {s for x, s, _ in error_rates.ROWS if x == d}
        assert "no interaction" in names and "at the margin" in names, d
    assert ("2^(5-1) in 10", "block x term sigma on every main effect", "own") in error_rates.ROWS
    assert error_rates.DESIGNS["two arms 65/130"][2:] == ((65, 130), 130)


def test_a_true_effect_at_the_margin_is_rarely_called_negligible_and_counts_when_it_is():
    """Every true effect at the margin: the error counted is a "negligible" verdict. On two
    arms of 12/24 blocks the TOST at alpha* keeps it rare; true effects at a quarter of the margin end
    negligible in most studies, and are counted, so the count is what it says."""
    rng = np.random.default_rng(3)
    at = [error_rates.run_plan(rng, "two arms 12/24", error_rates.SCENARIOS["at the margin"]) for _ in range(12)]
    assert sum(w for w, _ in at) <= 3
    inside = (0.0, 0.0, 0.0, error_rates.MARGIN / 4)
    out = [error_rates.run_plan(rng, "two arms 65/130", inside) for _ in range(6)]
    assert sum(w for w, _ in out) >= 5  # a quarter of the margin, 65 blocks: shown negligible, counted as the error


def test_a_look_with_too_few_blocks_decides_nothing():
    """The 2^3 in 3 plan never reaches a term's own error on 3 df: no study decides anything."""
    rng = np.random.default_rng(1)
    out = [error_rates.run_plan(rng, "2^3 in 3", error_rates.SCENARIOS["block x term sigma on A"]) for _ in range(4)]
    assert out == [(False, 0.0)] * 4
