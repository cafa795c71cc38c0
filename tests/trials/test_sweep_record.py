"""The sweep's record in one home (`trials.sweep_record`): the parent run's codec gives back
every field it writes, each field once; the parent keeps the workload's registry as data, so
that reading a sweep back from a real MLflow SQLite store imports no workload, and a name
another writer added since falls back to the workload's rules rather than to none."""

import json
from dataclasses import asdict, fields

import pytest
from mlflow.tracking import MlflowClient

import trials.sweep_record as sweep_record
from analysis.sweep_reader import load_runs
from trials import validate
from trials.store.keys import (DESIGN_PARAM, FACTORS_PARAM, REGISTRY_TAG, STORAGE_TAG, SUMMARY_TAG, sweep_parent,
                               sweep_trials)
from trials.store.runs import log_metrics
from trials.sweep_record import SweepRecord, from_parent, to_parent
from trials.tracking import open_ledger
from trials.workload import WorkloadError, load_workload
from tests.trials.conftest import D1_D9, write_spec

BACKBONE = {"parallel_stage": "backbone", "target_steps": 4, "eval_interval": 2, "eval_batches": 1,
            "spec_prompts": 0, "seq_len": 64, "max_corpus_bytes": 300_000}


def test_every_field_the_parent_codec_writes_reads_back_and_the_factors_once():
    rules = load_workload("dspark").registry
    plan = sweep_record.declared_plan({"max_replicates": 6, "alpha": 0.05})
    record = SweepRecord(experiment="e", description="why", experiment_id="3", parent_run_id="p", design="full",
                         responses={"val/bpb": {"better": "lower", "margin": 0.01}}, sequential=plan,
                         declared_plan=plan, storage="/s", timing='{"busy": 0}', primary_terms=["D1"],
                         contrasts={"c": {"from": {"D1": "a"}, "to": {"D1": "b"}}}, workload="dspark",
                         registry=sweep_record.recorded(rules, ["val/bpb", "tf/tau"]),
                         confirms={"study": "s", "term": "D1", "response": "val/bpb", "estimate": 0.1, "low": 0.0,
                                   "high": 0.2, "verdict": "undecided"})
    tags, params = to_parent(record, {"D1": {"a": {}, "b": {}}}, {"preset": "tiny"}, 2)
    tags.update({STORAGE_TAG: "/s", SUMMARY_TAG: '{"busy": 0}'})  # the identity's and the timing pass's writers
    back = from_parent(tags, params, ("e", "3", "p"), ["D1"], ["D1", "val/bpb", "tf/tau"])
    assert [f.name for f in fields(SweepRecord) if getattr(back, f.name) != getattr(record, f.name)] == []
    assert FACTORS_PARAM not in tags and DESIGN_PARAM not in tags  # written once, as write-once params
    assert json.loads(params[FACTORS_PARAM]) == {"D1": {"a": {}, "b": {}}}
    # a column the kept registry never resolved: the record names its workload only
    other = from_parent(tags, params, ("e", "3", "p"), ["D1"], ["D1", "val/bpb", "tf/tau", "train/loss"])
    assert other.registry == {} and asdict(other) == {**asdict(back), "registry": {}}


def test_a_crafted_parent_field_is_refused_naming_it():
    tags, params = to_parent(SweepRecord(experiment="e", design="full"), {"D1": {"a": {}}}, {}, 1)
    tags["primary_terms"] = json.dumps(["D1", 3])
    back = from_parent(tags, params, ("e", "1", "p"), ["D1"], ["D1"])
    assert back.primary_terms == ["D1", "3"]  # a tag is text: read as names
    tags["contrasts"] = json.dumps({"c": {"from": {"D7": "a"}, "to": {"D7": "b"}}})
    with pytest.raises(ValueError, match="contrasts.c: 'D7' is not a factor of the sweep"):
        from_parent(tags, params, ("e", "1", "p"), ["D1"], ["D1"])


def _sweep(tmp_path, corpus_dir):
    """Sweep `kept` in a SQLite store; its primary responses: val/bpb, which its runs report,
    and train/loss, which none has reported yet (a re-evaluation's, or a sweep read part-way)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "kept", D1_D9, base=BACKBONE,
                                         responses={"val/bpb": {"better": "lower", "margin": 0.01},
                                                    "train/loss": {"better": "lower", "margin": 0.1}}))
    ledger = open_ledger(uri, spec)
    for i, t in enumerate(spec.trials):
        run_id, _ = ledger.open_child(t, {})
        ledger.log_metrics(run_id, {"val/bpb": 2.0 + i / 10, "train/tokens_per_s": 100.0 + i}, step=4)
        ledger.finish(run_id, "FINISHED")
    ledger.finish(ledger.parent_id, "FINISHED")
    return uri, ledger


def test_the_parent_keeps_the_registry_and_a_reader_imports_no_workload(tmp_path, corpus_dir, monkeypatch):
    uri, ledger = _sweep(tmp_path, corpus_dir)
    kept = json.loads(MlflowClient(uri).get_run(ledger.parent_id).data.tags[REGISTRY_TAG])
    assert {"val/bpb", "train/tokens_per_s"} <= set(kept["names"]) and kept["metrics"]["val/bpb"]["better"] == "lower"

    def refused(name):
        raise WorkloadError(f"workload {name!r}: imported while reading a sweep")
    monkeypatch.setattr(sweep_record, "load_workload", refused)
    sweep = load_runs("kept", uri)
    assert sweep.registry.better("val/bpb") == "lower" and sweep.registry.better("train/tokens_per_s") == "higher"
    assert set(sweep.record.responses) == {"val/bpb", "train/loss"} and sweep.registry.better("train/loss") == "lower"

    # another writer's metric since (not through the ledger): its rule is the workload's, not none
    client = MlflowClient(uri)
    child = sweep_trials(client, client.get_experiment_by_name("kept").experiment_id)[0]
    log_metrics(client, child.info.run_id, {"train/ce": 1.5}, 5)
    with pytest.raises(ValueError, match="imported while reading"):
        load_runs("kept", uri)
    monkeypatch.undo()
    assert load_runs("kept", uri).registry.better("train/ce") == "lower"
    assert sweep_parent(client, child.info.experiment_id).data.params[DESIGN_PARAM] == "full"


def test_a_declared_curve_is_plotted_by_its_row_and_an_old_record_keeps_the_one_it_had():
    from trials.registry import from_record

    rules = load_workload("dspark").registry
    columns = ["spec/accept@10", "spec/accept@2", "tf/accept@1", "spec/accept@1", "spec/accept_rate@1", "val/bpb"]
    want = {"per-slot acceptance": ["spec/accept@1", "spec/accept@2", "spec/accept@10"]}
    assert rules.curves(columns) == want
    kept = sweep_record.recorded(rules, columns)
    assert from_record(json.loads(json.dumps(kept))).curves(columns) == want  # through the record, as data
    for row in kept["metrics"].values():  # a registry recorded before rows declared curves
        row.pop("curve", None)
    assert from_record(kept).curves(columns) == {}  # kept since: its rows say no curve
    kept.pop("declares")
    assert from_record(kept).curves(columns) == {}  # read as it is, a row's name says nothing
    old = sweep_record.SweepRecord(workload="dspark", registry=kept).rules()
    assert old.curves(columns) == want and old.curves(["val/bpb"]) == {}  # the workload's rows say it now
    gone = sweep_record.SweepRecord(workload="no_such_workload_here", registry=kept).rules()
    assert gone.curves(columns) == {}  # the workload gone: the rows as recorded


def test_a_damaged_registry_tag_is_read_past_and_written_anew(tmp_path, corpus_dir):
    """The kept registry is a copy of the workload's rules: a header whose parts are gone
    leaves the sweep readable by the workload's rules, and the next write replaces it."""
    uri, ledger = _sweep(tmp_path, corpus_dir)
    client = MlflowClient(uri)
    client.set_tag(ledger.parent_id, REGISTRY_TAG, json.dumps({"split_tag": 1, "parts": 2, "chars": 9000,
                                                                "sha256": "0" * 64}))
    sweep = load_runs("kept", uri)
    assert sweep.record.registry == {} and sweep.registry.better("val/bpb") == "lower"
    ledger.keep_registry(["train/ce"])
    kept = json.loads(client.get_run(ledger.parent_id).data.tags[REGISTRY_TAG])
    assert "train/ce" in kept["names"] and kept["metrics"]["train/ce"]["better"] == "lower"


@pytest.mark.parametrize("field, value", [("curve", ["a"]), ("curve", 3), ("raised_by", {"f": 1})])
def test_a_crafted_row_field_in_a_recorded_registry_is_refused_naming_the_row(field, value):
    from trials.registry import from_record

    with pytest.raises(ValueError, match=r"^registry.metrics.spec/accept@2: a metric row \("):
        from_record({"metrics": {"spec/accept@2": {"name": "spec/accept@2", field: value}}})
