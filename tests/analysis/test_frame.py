"""The sweep frame (`trials.export.SweepFrame`) across a parquet export: every field comes
back as it went, from a frame built here and from the committed studies' exports (written
while the record rode in pandas attrs)."""

import json
from dataclasses import fields
from pathlib import Path

import pandas as pd

from trials.registry import recorded
from trials.workload import load_workload
import pyarrow.parquet as pq
import pytest
from trials.export import SweepFrame

from trials.sweep_record import SweepRecord
from analysis.sweep_reader import read_parquet
from trials.export import PARQUET_KEY, to_parquet
from analysis.sequential import Plan

from .test_inputs import _sweep

EXPORTS = sorted((Path(__file__).resolve().parents[2] / "results").glob("*/runs.parquet"))


def _every_field_set() -> SweepFrame:
    """A frame none of whose fields holds its default, so that a field the export loses
    comes back different."""
    base = _sweep(fraction=False)
    # the toy workload: not the default, and its registry checks the responses on the way back
    record = SweepRecord(experiment="inputs", description="every field set", experiment_id="7",
                         parent_run_id="p" * 32, design="full",
                         responses={"val/acc": {"better": "higher", "margin": 0.01}},
                         sequential=Plan(6, 0.05).to_json(), declared_plan=Plan(6, 0.05).to_json(),
                         storage="/srv/sweeps", primary_terms=["A", "B", "diag"],
                         timing='{"id": "p", "response": "spec/speedup", "busy": 2}',
                         contrasts={"diag": {"from": {"A": "lo", "B": "lo"}, "to": {"A": "hi", "B": "hi"}}},
                         confirms={"study": "screen", "term": "A", "response": "y", "estimate": 0.5, "low": -0.1,
                                   "high": 1.1, "verdict": "undecided"},
                         workload="tests.toy.workload:WORKLOAD",
                         registry=recorded(load_workload("tests.toy.workload:WORKLOAD").registry, ["val/acc", "val/loss"]))
    failed = {"run_id": "r9", "run_name": "A=lo|B=lo|C=lo r9", "status": "FAILED", "cell": "A=lo|B=lo|C=lo",
              "replicate": "9", "seed": "9", "arm": "factorial", "run_order": "99"}
    local = {"run_id": "local-x", "run_name": "x", "status": "FINISHED", "tags": {"trial_key": "x"},
             "params": {"lr": "0.001"}, "metrics": {"spec/tau": 3.0}, "run_s": 1.5, "checkpoint": "ck/x"}
    return SweepFrame(base.runs, factors=base.factors, record=record, incomplete=[failed], local_rows=[local])


def test_every_field_of_the_frame_survives_the_parquet_round_trip(tmp_path):
    sweep = _every_field_set()
    blank = SweepFrame(pd.DataFrame())
    others = [f.name for f in fields(SweepFrame) if f.name != "runs"]
    for name in others:  # a field added to the frame or its record must be set above too
        assert getattr(sweep, name) != getattr(blank, name), f"_every_field_set leaves {name} at its default"
    for f in fields(SweepRecord):
        assert getattr(sweep.record, f.name) != getattr(blank.record, f.name), f"record.{f.name} left at its default"
    to_parquet(sweep, tmp_path / "runs.parquet")
    back = read_parquet(tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(back.runs, sweep.runs, check_categorical=True)
    for name in others:
        assert getattr(back, name) == getattr(sweep, name), name
    assert back.incomplete_runs().equals(sweep.incomplete_runs())


@pytest.mark.parametrize("path", EXPORTS, ids=[p.parent.name for p in EXPORTS])
def test_a_committed_export_keeps_its_metadata_through_a_read_and_a_write(path, tmp_path):
    """What an export's metadata holds is what its frame holds and writes again, and the
    workload's registry (exports written before kept none); the second copy pyarrow kept of
    it (pandas attrs, then) is not restored onto the runs."""
    stored = json.loads(pq.read_schema(path).metadata[PARQUET_KEY])
    sweep = read_parquet(path)
    assert sweep.runs.attrs == {}
    to_parquet(sweep, tmp_path / "again.parquet")
    again = json.loads(pq.read_schema(tmp_path / "again.parquet").metadata[PARQUET_KEY])
    registry = again.pop("registry")
    assert again == {k: v for k, v in sweep.metadata().items() if k != "registry"}
    assert {k: again[k] for k in stored if k != "registry"} == {k: v for k, v in stored.items() if k != "registry"}
    assert all(registry["metrics"][r]["better"] for r in sweep.record.responses)  # each primary response's row
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "again.parquet").runs, sweep.runs, check_categorical=True)
