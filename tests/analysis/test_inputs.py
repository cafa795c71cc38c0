"""What the analysis does with the inputs a team's sweeps produce: fractional designs, a
response some runs lack, a parquet written by another tool, out-of-range plan arguments."""

import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from analysis import power
from analysis.anova import AnalysisError
from trials.export import SweepFrame
from trials.sweep_record import SweepRecord
from analysis.sweep_reader import read_parquet
from trials.export import to_parquet
from analysis.report import build_report
from tests.conftest import fill_up

from .test_verdicts import design


def _sweep(fraction: bool, replicates: int = 2) -> SweepFrame:
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
    record = SweepRecord(experiment="inputs", design="2^(3-1)" if fraction else "full",
                         responses={"spec/tau": {"better": "higher", "margin": 0.1}})
    return SweepFrame(df, factors=list("ABC"), record=record)


def test_a_fractional_design_is_analysed_with_its_aliases_named():
    # 4 blocks: a term's own error needs 3 df or more
    rep = build_report(_sweep(fraction=True, replicates=4), None)
    table = rep.decision.table()
    assert set(table["term"]) == {"A", "B", "C"}  # the interactions are aliased with the main effects
    a = table[table["term"] == "A"].iloc[0]
    assert a["verdict"] == "matters, beyond the margin" and abs(a["estimate"] - 0.5) < 0.1
    assert "fractional design 2^(3-1)" in rep.summary and "A = B:C" in rep.summary
    # a fraction that lost a cell is refused with one line, not analysed as if complete
    short = _sweep(fraction=True)
    short = short.with_runs(short.runs[short.runs["cell"] != short.runs["cell"].iloc[0]])
    with pytest.raises(AnalysisError, match=r"fractional design 2\^\(3-1\): 3 of its 4 cells"):
        build_report(short, None)


def test_a_full_factorial_with_an_empty_cell_is_still_refused():
    sweep = _sweep(fraction=False)
    cut = sweep.with_runs(sweep.runs[sweep.runs["cell"] != "A=lo|B=lo|C=lo"])
    with pytest.raises(AnalysisError, match="empty cell"):
        build_report(cut, None)


def test_a_response_some_runs_lack_is_analysed_on_the_others_and_they_are_named():
    sweep = _sweep(fraction=False)
    df = sweep.runs
    df.loc[[0, 3], "val/bpb"] = np.nan  # two runs whose evaluation left no value
    rep = build_report(sweep, None, responses=["spec/tau", "val/bpb"])
    assert {"spec/tau", "val/bpb"} <= set(rep.results)  # the other response still reports
    names = ", ".join(df.loc[[0, 3], "run_name"])
    assert f"warning: val/bpb is analysed on {len(df) - 2} of {len(df)} runs; without a value: {names}" in rep.summary
    assert rep.decision.checks["val/bpb"].n == len(df) - 2 and rep.decision.checks["spec/tau"].n == len(df)
    # a cell left with one run: HC2 is undefined there, and the report says which errors it used
    assert rep.decision.checks["val/bpb"].errors == "pooled (HC2 undefined: a cell seen once)"
    assert "pooled (HC2 undefined: a cell seen once) errors (unbalanced design)" in rep.summary
    # the default responses: one that no run holds is skipped, the report still answers
    df["conf/ece_mean"] = np.nan
    rep = build_report(sweep, None)
    assert "spec/tau" in rep.results


def test_a_parquet_of_numeric_strings_is_read_and_other_values_are_refused(tmp_path):
    sweep = _sweep(fraction=False)
    df = sweep.runs
    as_text = df.copy()
    as_text["spec/tau"] = as_text["spec/tau"].map(repr)
    to_parquet(sweep.with_runs(as_text), tmp_path / "text.parquet")
    back = read_parquet(tmp_path / "text.parquet").runs
    assert back["spec/tau"].dtype == float and np.allclose(back["spec/tau"], df["spec/tau"])
    as_text.loc[2, "spec/tau"] = "n/a"
    to_parquet(sweep.with_runs(as_text), tmp_path / "bad.parquet")
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "x", "--parquet",
                        str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "column 'spec/tau' holds 1 non-numeric value(s), e.g. 'n/a'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "rep").exists()


def test_plan_arguments_out_of_range_give_one_line_and_huge_effects_have_power_one(tmp_path):
    assert power.t_power(-1e9, 0.01, 7, 0.05) == 1.0 and power.t_power(1e-300, 0.01, 7, 0.05) < 0.06
    to_parquet(_sweep(fraction=False), tmp_path / "runs.parquet")
    for arg, message in (("--power=1.5", "--power: a probability in (0, 1), such as 0.8, got 1.5"),
                         ("--effect=nan", "--effect: must be a finite non-zero number, got nan"),
                         ("--alpha=0", "--alpha: must lie in (0, 0.5)"),
                         ("--alpha=0.9", "--alpha: must lie in (0, 0.5) (at 0.5 or more an interval")):
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

    sweep = _sweep(fraction=False)
    sweep.runs["parallel_stage"] = "backbone"
    sweep.runs["run_s"] = 60.0
    small = {"val/bpb": {"better": "lower", "margin": 0.0001}}  # small: stays undecided
    text = plan_text(replace(sweep, record=replace(sweep.record, responses=small)), None)
    assert "val/bpb (primary): " in text and "no jackknife records: the evaluation's part is unknown" in text
    assert "trials reeval" not in text  # nothing prices a re-evaluation without the records


def test_the_plan_uses_the_alpha_of_the_reports_look():
    """A sweep augmented look after look: the plan judges at the alpha the report uses."""
    from analysis.plan import plan_text, plan_with_look
    from analysis.sequential import Plan

    sweep = _sweep(fraction=False, replicates=3)
    sweep.runs["run_s"] = 60.0
    sweep = replace(sweep, record=replace(sweep.record, sequential=Plan(6, 0.05).to_json()))  # declared, no look yet
    text, look = plan_with_look(sweep, None)
    rep = build_report(sweep, None)
    assert look.new and look.index == 1 and look.alpha < 0.05
    spent = f"{look.plan.spent_alpha():.3g} of alpha 0.05 spent"
    assert spent in text and spent in rep.summary
    assert rep.look.alpha == look.alpha and rep.look.look.data == look.look.data  # the same data: the same look
    what_if = plan_text(sweep, None, alpha=0.05)  # an explicit --alpha: a what-if at that alpha, not a look
    assert "at alpha 0.05 are not a look" in what_if and "what-if" in what_if


def test_algorithm_1_on_a_curve_where_it_verifies_one_length_everywhere_is_not_ranked():
    from analysis.diagnostics import why_degenerate

    sweep = _sweep(fraction=False)
    df = sweep.runs
    df["sched/alg1_throughput@R16"] = 1000 + 50 * (df["A"] == "hi") + np.random.default_rng(2).normal(0, 5, len(df))
    df["sched/alg1_fixed@R16"] = 1.0
    df["sched/alg1_len@R16"] = 7.0  # the flat part of the curve: every request verifies all K
    rules = sweep.registry  # DSpark's row declares the rule (`degenerate_when`)
    why = why_degenerate(df, "drafter", "sched/alg1_throughput@R16", rules)
    assert "verifies 7 token(s) for every request of every run at R16" in why
    rep = build_report(sweep, None, responses=["spec/tau", "sched/alg1_throughput@R16"])
    assert "sched/alg1_throughput@R16" not in rep.results and "not ranked: degenerate on this capacity curve" in \
        rep.summary
    primary = {"sched/alg1_throughput@R16": {"better": "higher", "margin": 10}}
    with pytest.raises(AnalysisError, match="primary response sched/alg1_throughput@R16 cannot be ranked"):
        build_report(replace(sweep, record=replace(sweep.record, responses=primary)), None)
    df.loc[0, "sched/alg1_len@R16"] = 6.5  # one run's scheduler chose otherwise: it ranks
    assert why_degenerate(df, "drafter", "sched/alg1_throughput@R16", rules) is None


# ---------------------------------------------------------------- a crafted export is input like a spec (issue 29)

def _crafted(tmp_path, meta=None, frame=None, raw=None) -> str:
    """A real export of `_sweep`, its frame changed by `frame`, its dspark.attrs metadata by
    `meta` (a function of the parsed metadata) or replaced by the bytes `raw`."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    to_parquet(_sweep(fraction=False), tmp_path / "good.parquet")
    table = pq.read_table(tmp_path / "good.parquet")
    attrs = json.loads(table.schema.metadata[b"dspark.attrs"])
    if frame is not None:
        changed = table.to_pandas()
        frame(changed)
        table = pa.Table.from_pandas(changed, preserve_index=False)
    if meta is not None:
        meta(attrs)
    path = tmp_path / "crafted.parquet"
    pq.write_table(table.replace_schema_metadata({b"dspark.attrs": raw or json.dumps(attrs).encode()}), path)
    return str(path)


def _one_line_refusal(capsys, tmp_path, path, *words):
    """`analysis report` and `analysis plan` on the export: exit 2, one line naming the file
    and what is wrong, no report folder."""
    from analysis.cli import main

    for argv in (["report", "x", "--parquet", path, "--out", str(tmp_path / "rep")], ["plan", "x", "--parquet", path]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert all(w in err for w in words), err
    assert not (tmp_path / "rep").exists()


def _set(**fields):
    return lambda attrs: attrs.update(fields)


@pytest.mark.parametrize("meta,words", [
    (_set(responses={"spec/tau": {"better": "sideways", "margin": 1}}), ["responses.spec/tau.better", "sideways"]),
    (_set(responses={"spec/tau": {"better": "higher", "margin": -1}}), ["responses.spec/tau.margin", "-1"]),
    (_set(responses={"spec/tau": {"better": "higher", "margin": float("nan")}}), ["responses.spec/tau.margin", "nan"]),
    (_set(responses={"spec/tau": {"better": "lower", "margin": 0.1}}), ["higher is better for spec/tau"]),
    (_set(responses={"spec/tau": 5}), ["responses.spec/tau: must be {better"]),
    (_set(responses=["spec/tau"]), ["responses: must map metric names"]),
    (_set(responses={"spec/taus": {"margin": 1}}), ["responses.spec/taus: not a metric"]),
    (_set(factors=[["D1"], "D9"]), ["factors: a list of column names"]),
    (_set(factors=["A", "Z"]), ["factor column(s) Z missing"]),
    (_set(incomplete=[5, "x"]), ["incomplete[0]: a run record"]),
    (_set(incomplete=[{"status": "FAILED", "cell": {"a": 1}}]), ["incomplete[0].cell: a number or text"]),
    (_set(incomplete={"a": 1}), ["incomplete: a list of run records"]),
    (_set(primary_terms="A"), ["primary_terms: a list of term names"]),
    (_set(contrasts=["A"]), ["contrasts: a mapping of names"]),
    (_set(contrasts={"d": {"from": {"A": "lo"}, "to": {"B": "hi"}}}), ["contrasts.d: {from:", "over the same factors"]),
    (_set(contrasts={"d": {"from": {"A": 1}, "to": {"A": 2}}}), ["contrasts.d: {from:"]),
    (_set(contrasts={"d": {"from": {"Z": "lo"}, "to": {"Z": "hi"}}}), ["contrasts.d: 'Z' is not a factor of the sweep"]),
    (_set(description=["x"]), ["description: text"]),
    (_set(sequential='{"max_replicates": 6, "looks": [{"blocks": {"x": 1}}]}'), ["the sequential record is malformed"]),
    (_set(sequential='{"max_replicates": "lots"}'), ["the sequential record is malformed"]),
    (_set(sequential='{"max_replicates": 6, "declared": true, "looks": [{"blocks": 2, "alpha": NaN}]}'),
     ["the sequential record is malformed", "look 1"]),
    (_set(sequential="[1]"), ["the sequential record is malformed", "not a JSON object"]),
])
def test_a_crafted_exports_metadata_is_refused_in_one_line(tmp_path, capsys, meta, words):
    """Each of these once produced verdicts silently (a sideways direction, a negative or
    NaN margin) or a traceback (TypeError, AttributeError)."""
    path = _crafted(tmp_path, meta=meta)
    _one_line_refusal(capsys, tmp_path, path, f"parquet: {path}: its dspark.attrs metadata: ", *words)


def test_deep_metadata_a_nan_replicate_and_non_finite_responses_are_named(tmp_path, capsys):
    deep = _crafted(tmp_path, raw=b'{"factors": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    _one_line_refusal(capsys, tmp_path, deep, deep, "nests too deep")  # was a RecursionError

    def nan_replicate(df):
        df["replicate"] = df["replicate"].astype(float)
        df.loc[3, "replicate"] = np.nan

    path = _crafted(tmp_path, frame=nan_replicate)  # was a TypeError deep in the design
    _one_line_refusal(capsys, tmp_path, path, path, "column 'replicate'", "not whole numbers", "nan", "row 3")
    path = _crafted(tmp_path, frame=lambda df: df.__setitem__("spec/tau", np.nan))
    _one_line_refusal(capsys, tmp_path, path, "primary response spec/tau", "column 'spec/tau': no run holds a value")
    path = _crafted(tmp_path, frame=lambda df: df.loc.__setitem__((2, "spec/tau"), np.inf))
    _one_line_refusal(capsys, tmp_path, path, "column 'spec/tau' holds 1 infinite value(s)", "inf in run")
    # a secondary response with an infinite value: the report names it and analyses the others
    sweep = read_parquet(_crafted(tmp_path, frame=lambda df: df.loc.__setitem__((2, "val/bpb"), -np.inf)))
    rep = build_report(sweep, None, responses=["spec/tau"])
    assert "spec/tau" in rep.results
    with pytest.raises(AnalysisError, match=r"response val/bpb: column 'val/bpb' holds 1 infinite value\(s\), "
                                            r"e.g. -inf"):
        build_report(sweep, None, responses=["val/bpb"])


def test_a_long_description_is_cut_in_the_reports(tmp_path):
    from analysis.rendering.words import DESCRIPTION_SHOWN

    rep = build_report(read_parquet(_crafted(tmp_path, meta=_set(description="d" * 50_000))), tmp_path / "rep")
    cut = f"{'d' * DESCRIPTION_SHOWN} [... cut: {50_000 - DESCRIPTION_SHOWN} more characters not shown]"
    for text in (rep.summary, rep.html_path.read_text(), rep.markdown_path.read_text()):
        assert cut in text and "d" * (DESCRIPTION_SHOWN + 1) not in text


def test_the_plan_prices_terms_outside_the_family_in_blocks_too():
    from analysis.plan import plan_text

    sweep = _sweep(fraction=False, replicates=3)
    df = sweep.runs
    df["run_s"] = 60.0
    df["spec/tau_greedy"] = df["spec/tau"] + np.random.default_rng(5).normal(0, 0.3, len(df))  # a secondary response
    text = plan_text(sweep, None, responses=["spec/tau_greedy"])
    assert "spec/tau_greedy (secondary): " in text and "unreplicated" not in text
    assert "more block(s)" in text.split("spec/tau_greedy (secondary): ", 1)[1]


def _cli(*args, cwd):
    r = subprocess.run([sys.executable, "-m", "analysis.cli", *args], capture_output=True, text=True, cwd=cwd)
    return r.returncode, r.stdout, r.stderr


def test_a_full_disk_under_report_and_export_ends_in_one_line_and_leaves_nothing_half_written(tmp_path, mount, store):
    from .conftest import synthetic_sweep

    synthetic_sweep(store, name="full", failed=0)
    small = mount(1)
    fill_up(small, 16 * 1024)
    # the export: a parquet of 24 runs does not fit in 16 KB
    rc, out, err = _cli("export", "full", str(small / "runs.parquet"), "--tracking-uri", store, cwd=tmp_path)
    assert rc == 4, err
    assert err.strip().splitlines() == [f"analysis: error: cannot write {small / 'runs.parquet'}: "
                                         "No space left on device"], err
    # the report: its HTML (plots embedded) does not fit either; nothing is logged to the store
    rc, out, err = _cli("report", "full", "--tracking-uri", store, "--out", str(small), "--no-log", cwd=tmp_path)
    assert rc == 4, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"analysis: error: cannot write {small / 'full'}") and "No space left on device" in err
    left = sorted(p.name for p in small.rglob("*") if p.is_file())
    assert left == ["filler"], left  # no temporary file, no half of a report or an export
    # with room again, the same commands write both whole
    (small / "filler").unlink()
    assert _cli("export", "full", str(small / "runs.parquet"), "--tracking-uri", store, cwd=tmp_path)[0] == 0
    assert len(read_parquet(small / "runs.parquet").runs) == 32
    assert _cli("report", "full", "--tracking-uri", store, "--out", str(small), "--no-log", cwd=tmp_path)[0] == 0
    assert (small / "full" / "report.html").read_text().endswith("</html>")


def test_blocks_that_are_copies_are_refused_in_one_line_naming_the_seed(tmp_path, capsys):
    """A trainer that ignores the seed it is given: every block repeats the first, so no
    interval, F or boundary distance can be computed honestly. One line naming the cause
    and the doc, before any verdict; a response that varies is analysed as before."""
    import numpy as np

    from analysis.cli import main
    from trials.tracking import open_ledger
    from trials.validate import parse

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = parse({"name": "copies", "base": {"preset": "tiny"}, "replicates": 4,
                  "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
                              "D9": {"hidden": {"confidence_input": "hidden"},
                                     "markov": {"confidence_input": "hidden+markov"}}},
                  "responses": {"spec/tau": {"better": "higher", "margin": 0.01}}})
    ledger, rng = open_ledger(uri, spec), np.random.default_rng(0)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {"target_hash": "0" * 16})
        y = 3.0 + 0.0327 * (t.levels["D1"] == "aligned")  # the same in every block: the seed did nothing
        ledger.log_metrics(run_id, {"spec/tau": y, "tf/tau": y + rng.normal(0, 0.01)}, step=1)
        ledger.finish(run_id, "FINISHED", None)
    ledger.finish(ledger.parent_id, "FINISHED")
    assert main(["report", "copies", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--no-log"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert ("spec/tau: every cell's runs are identical across its 4 replicate blocks" in err
            and "the trainer ignores config.seed" in err and "docs/extending.md" in err), err
    assert not (tmp_path / "r" / "copies" / "report.html").exists()
    # the check refuses copies only: one cell that varies, or values that differ at the 1e-6 level, pass
    import pandas as pd

    from analysis.anova import AnalysisError
    from analysis.diagnostics import check_replicates_vary

    grid = pd.DataFrame({"A": ["lo", "hi"] * 4, "replicate": [0, 0, 1, 1, 2, 2, 3, 3], "y": [2.0, 3.0] * 4})
    with pytest.raises(AnalysisError, match="identical across its 4 replicate blocks"):
        check_replicates_vary(grid, "y", ["A"])
    check_replicates_vary(grid.assign(y=grid["y"] + [0, 0, 0, 0, 0, 0, 0, 1e-6]), "y", ["A"])
    check_replicates_vary(grid[grid["replicate"] == 0], "y", ["A"])  # one block: nothing to compare


def test_a_reevaluation_left_unfinished_is_named_on_the_count_its_responses_are_drawn_on():
    """Runs whose latest evaluations counted different items: the note names the count
    column the registry gives the chosen responses, and only for those responses."""
    sweep = _sweep(fraction=False)
    df = sweep.runs
    df["split/prompts"] = [48 if i % 2 else 96 for i in range(len(df))]
    df["split/eval_batches"] = 8
    summary = build_report(sweep, None, responses=["spec/tau", "val/bpb"]).summary
    assert ("note: the runs' latest evaluations counted different numbers of items on split/prompts (48, 96): "
            "finish `trials reeval` before reading spec/tau") in summary
    assert "on split/eval_batches" not in summary
    df["split/prompts"], df["split/eval_batches"] = 96, [4 if i % 3 else 8 for i in range(len(df))]
    assert "on split/eval_batches (4, 8): finish `trials reeval` before reading val/bpb" in \
        build_report(sweep, None, responses=["spec/tau", "val/bpb"]).summary
    quiet = build_report(sweep, None, responses=["spec/tau"]).summary  # no response drawn on the batches
    assert "counted different numbers of items" not in quiet


def test_a_flat_response_is_what_its_row_declares_not_a_name_the_statistics_know():
    """`degenerate_when` on a workload's own row makes its response unrankable on runs that
    are flat by its flag; a DSpark registry recorded before rows declared it keeps the rule
    it was analysed with; a malformed declaration is refused as the record is read."""
    from analysis.diagnostics import why_degenerate
    from trials.registry import Registry, Row, from_record, recorded
    from trials.sweep_record import SweepRecord
    from trials.workload import load_workload

    class Own:
        REGISTRY = (Row("cache/hit_rate@B", "higher", "ratio", ("x",), "hits at batch B",
                        degenerate_when={"flag": "cache/full@{at}", "same": "cache/size@{at}",
                                         "why": "every run's cache held {same} entries at {at}: it ranks nothing"}),)
        DEFAULT_RESPONSES = {}

        def lookup(self, name):
            return self.REGISTRY[0] if name.startswith("cache/hit_rate@") else None

    rows = pd.DataFrame({"cache/hit_rate@B8": [0.1, 0.2, 0.3], "cache/full@B8": [1, 1, 1], "cache/size@B8": [64] * 3})
    assert why_degenerate(rows, "x", "cache/hit_rate@B8", Registry(Own())) == \
        "every run's cache held 64 entries at B8: it ranks nothing"
    assert why_degenerate(rows.assign(**{"cache/full@B8": [1, 0, 1]}), "x", "cache/hit_rate@B8", Registry(Own())) is None
    # DSpark's names mean nothing to a registry that declares no rule for them
    named = rows.rename(columns=lambda c: c.replace("cache/hit_rate", "sched/alg1_throughput")
                        .replace("cache/full", "sched/alg1_fixed").replace("cache/size", "sched/alg1_len"))
    assert why_degenerate(named, "x", "sched/alg1_throughput@B8", Registry(Own())) is None
    # a registry recorded before rows declared it: read with the rule it was analysed with
    data = recorded(load_workload("dspark").registry, ["sched/alg1_throughput@R16"])
    data["metrics"]["sched/alg1_throughput@R16"].pop("degenerate_when")
    data.pop("declares")
    old = named.rename(columns=lambda c: c.replace("@B8", "@R16"))
    kept = SweepRecord(workload="dspark", registry=data).rules()  # its rows read with the workload's current ones
    assert "verifies 64 token(s) for every request of every run at R16" in \
        why_degenerate(old, "drafter", "sched/alg1_throughput@R16", kept)
    assert why_degenerate(old, "drafter", "sched/alg1_throughput@R16", from_record(data)) is None
    data["metrics"]["sched/alg1_throughput@R16"]["degenerate_when"] = {"flag": "x"}
    with pytest.raises(ValueError, match="sched/alg1_throughput@R16"):
        from_record(data)
