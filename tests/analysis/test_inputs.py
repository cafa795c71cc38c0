"""What the analysis does with the inputs a team's sweeps produce: fractional designs, a
response some runs lack, a parquet written by another tool, out-of-range plan arguments."""

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from analysis import power
from analysis.anova import AnalysisError
from analysis.load import read_parquet, to_parquet
from analysis.report import build_report

from .test_verdicts import design


def _sweep(fraction: bool, replicates: int = 2) -> pd.DataFrame:
    df = design({"A": 0.5, "B": 0.0, "C": 0.2}, replicates=replicates)
    if fraction:  # the half with A*B*C = +1: a 2^(3-1) with C = AB
        sign = lambda v: -1 if v == "lo" else 1  # noqa: E731
        df = df[[sign(a) * sign(b) * sign(c) == 1 for a, b, c in zip(df.A, df.B, df.C)]].reset_index(drop=True)
    df["cell"] = [f"A={a}|B={b}|C={c}" for a, b, c in zip(df.A, df.B, df.C)]
    df["run_name"] = df["cell"] + " r" + df["replicate"].astype(str)
    df["run_order"] = range(len(df))
    df["parallel_stage"] = "drafter"
    df["spec/tau"] = df.pop("y")
    df["val/bpb"] = 2.0 + 0.01 * (df["A"] == "hi") + np.random.default_rng(1).normal(0, 0.002, len(df))
    df.attrs.update(factors=list("ABC"), experiment="inputs", design="2^(3-1)" if fraction else "full",
                    responses={"spec/tau": {"better": "higher", "margin": 0.1}})
    return df


def test_a_fractional_design_is_analysed_with_its_aliases_named():
    rep = build_report(_sweep(fraction=True), None)
    table = rep.decision.table()
    assert set(table["term"]) == {"A", "B", "C"}  # the interactions are aliased with the main effects
    a = table[table["term"] == "A"].iloc[0]
    assert a["verdict"] == "matters, beyond the margin" and abs(a["estimate"] - 0.5) < 0.1
    assert "fractional design 2^(3-1)" in rep.summary and "A = B:C" in rep.summary
    # a fraction that lost a cell is refused with one line, not analysed as if complete
    short = _sweep(fraction=True)
    short = short[short["cell"] != short["cell"].iloc[0]]
    short.attrs.update(_sweep(fraction=True).attrs)
    with pytest.raises(AnalysisError, match=r"fractional design 2\^\(3-1\): 3 of its 4 cells"):
        build_report(short, None)


def test_a_full_factorial_with_an_empty_cell_is_still_refused():
    df = _sweep(fraction=False)
    cut = df[df["cell"] != "A=lo|B=lo|C=lo"]
    cut.attrs.update(df.attrs)
    with pytest.raises(AnalysisError, match="empty cell"):
        build_report(cut, None)


def test_a_response_some_runs_lack_is_analysed_on_the_others_and_they_are_named():
    df = _sweep(fraction=False)
    df.loc[[0, 3], "val/bpb"] = np.nan  # two runs whose evaluation left no value
    rep = build_report(df, None, responses=["spec/tau", "val/bpb"])
    assert {"spec/tau", "val/bpb"} <= set(rep.results)  # the other response still reports
    names = ", ".join(df.loc[[0, 3], "run_name"])
    assert f"warning: val/bpb is analysed on {len(df) - 2} of {len(df)} runs; without a value: {names}" in rep.summary
    assert rep.decision.checks["val/bpb"].n == len(df) - 2 and rep.decision.checks["spec/tau"].n == len(df)
    # a cell left with one run: HC2 is undefined there, and the report says which errors it used
    assert rep.decision.checks["val/bpb"].errors == "pooled (HC2 undefined: a cell seen once)"
    assert "pooled (HC2 undefined: a cell seen once) errors (unbalanced design)" in rep.summary
    # the default responses: one that no run holds is skipped, the report still answers
    df["conf/ece_mean"] = np.nan
    rep = build_report(df, None)
    assert "spec/tau" in rep.results


def test_a_parquet_of_numeric_strings_is_read_and_other_values_are_refused(tmp_path):
    df = _sweep(fraction=False)
    as_text = df.copy()
    as_text["spec/tau"] = as_text["spec/tau"].map(repr)
    as_text.attrs.update(df.attrs)
    to_parquet(as_text, tmp_path / "text.parquet")
    back = read_parquet(tmp_path / "text.parquet")
    assert back["spec/tau"].dtype == float and np.allclose(back["spec/tau"], df["spec/tau"])
    as_text.loc[2, "spec/tau"] = "n/a"
    to_parquet(as_text, tmp_path / "bad.parquet")
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "x", "--parquet",
                        str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "column 'spec/tau' holds 1 non-numeric value(s), e.g. 'n/a'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "rep").exists()


def test_plan_arguments_out_of_range_give_one_line_and_huge_effects_have_power_one(tmp_path):
    assert power.t_power(-1e9, 0.01, 7, 0.05) == 1.0 and power.t_power(1e-300, 0.01, 7, 0.05) < 0.06
    df = _sweep(fraction=False)
    to_parquet(df, tmp_path / "runs.parquet")
    for arg, message in (("--power=1.5", "--power: must lie in (0, 1), got 1.5"),
                         ("--effect=nan", "--effect: must be a finite non-zero number, got nan"),
                         ("--alpha=0", "--alpha: must lie in (0, 1)")):
        r = subprocess.run([sys.executable, "-m", "analysis.cli", "plan", "x", "--parquet",
                            str(tmp_path / "runs.parquet"), arg], capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "plan", "x", "--parquet",
                        str(tmp_path / "runs.parquet"), "--effect=-1e9", "--response", "spec/tau"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "nan" not in r.stdout and "power 1.00" in r.stdout, r.stdout
    assert math.isfinite(power.power(-1e9, 0.05, 8, 2))


def test_the_plan_of_a_sweep_without_decoded_responses_names_blocks_only():
    from analysis.plan import plan_text

    df = _sweep(fraction=False)
    df["parallel_stage"] = "backbone"
    df["run_s"] = 60.0
    df.attrs["responses"] = {"val/bpb": {"better": "lower", "margin": 0.0001}}  # small: stays undecided
    text = plan_text(df, None)
    assert "val/bpb (primary): " in text and "no jackknife records: the evaluation's share of the noise is unknown" in text
    assert "trials reeval" not in text  # nothing prices a re-evaluation without the records


def test_the_plan_uses_the_alpha_of_the_reports_look():
    """A sweep augmented look after look: the plan judges at the alpha the report uses."""
    from analysis.plan import plan_text, plan_with_look
    from analysis.sequential import Plan

    df = _sweep(fraction=False, replicates=3)
    df["run_s"] = 60.0
    df.attrs["sequential"] = Plan(6, 0.05).to_json()  # declared, no look yet
    text, look = plan_with_look(df, None)
    rep = build_report(df, None)
    assert look.new and look.index == 1 and look.alpha < 0.05
    assert f"alpha {look.alpha:.3g}" in text and f"alpha {look.alpha:.3g}" in rep.summary
    assert rep.look.alpha == look.alpha and rep.look.look.data == look.look.data  # the same data: the same look
    what_if = plan_text(df, None, alpha=0.05)  # an explicit --alpha: a what-if at that alpha, not a look
    assert "alpha 0.05," in what_if and "what-if" in what_if


def test_algorithm_1_on_a_curve_where_it_verifies_one_length_everywhere_is_not_ranked():
    from analysis.diagnostics import why_degenerate

    df = _sweep(fraction=False)
    df["sched/alg1_throughput@R16"] = 1000 + 50 * (df["A"] == "hi") + np.random.default_rng(2).normal(0, 5, len(df))
    df["sched/alg1_fixed@R16"] = 1.0
    df["sched/alg1_len@R16"] = 7.0  # the flat part of the curve: every request verifies all K
    assert "verifies 7 token(s) for every request of every run at R16" in why_degenerate(df, "drafter",
                                                                                            "sched/alg1_throughput@R16")
    rep = build_report(df, None, responses=["spec/tau", "sched/alg1_throughput@R16"])
    assert "sched/alg1_throughput@R16" not in rep.results and "not ranked: degenerate on this capacity curve" in \
        rep.summary
    df.attrs["responses"] = {"sched/alg1_throughput@R16": {"better": "higher", "margin": 10}}
    with pytest.raises(AnalysisError, match="primary response sched/alg1_throughput@R16 cannot be ranked"):
        build_report(df, None)
    df.loc[0, "sched/alg1_len@R16"] = 6.5  # one run's scheduler chose otherwise: it ranks
    assert why_degenerate(df, "drafter", "sched/alg1_throughput@R16") is None
