"""A run's evaluation items: what `report(..., items=)` takes, the leave-out groups the engine
forms, one `items.json` artifact per run (not metrics) that a later evaluation merges into,
the statistics' columns read back from it, and stores and exports from before it still read."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis.sweep_reader import load_runs, read_parquet
from trials.export import to_parquet
from analysis.variance import item_records
from trials.store.items import FORMAT, ITEMS_FILE, ITEMS_TAG, columns, document, encode
from trials.store.keys import StoreReadError, SWEEP_PARENT_TAG, TRIAL_KEY_TAG
from trials.store.reader import run_items
from trials.store.runs import log_metrics, loggable

ROOT = Path(__file__).resolve().parents[3]


def test_per_item_values_become_each_groups_leave_out_mean_and_bad_items_name_the_response():
    values = [1.0, 2.0, 3.0, 6.0, 8.0]  # G = 5: item i alone in group i
    got = encode({"val/loss": values}, {"val/loss": 4.0})
    assert [got[f"jack/val/loss@g{g}"] for g in range(5)] == [np.mean(np.delete(values, g)) for g in range(5)]
    assert got["jack/val/loss@n"] == 5.0 and "jack/val/loss@g5" not in got
    many = encode({"r/x": list(range(40))}, {})  # 40 items in 16 groups: item i in group i mod 16
    assert len([k for k in many if "@g" in k]) == 16
    assert many["jack/r/x@g0"] == pytest.approx(np.mean([i for i in range(40) if i % 16 != 0]))
    recomputed = encode({"val/ece": {"items": 3, "without": [0.1, 0.2, 0.3]}}, {})
    assert recomputed == {"jack/val/ece@g0": 0.1, "jack/val/ece@g1": 0.2, "jack/val/ece@g2": 0.3, "jack/val/ece@n": 3.0}
    for bad, said in (({"val/loss": [1.0]}, "needs at least 2"),
                      ({"val/loss": [1.0, "a"]}, "'a' is not a number"),
                      ({"val/loss": [1.0, 3.0]}, "average 2, but its reported value is 4"),
                      ({"val/ece": {"items": 5, "without": [0.1]}}, "between 2 and items values"),
                      ({"val/ece": {"items": 2, "without": [0.1, 0.2, 0.3]}}, "between 2 and items values"),
                      ([1.0], "a dict of response")):
        with pytest.raises(ValueError, match=f"{'items' if isinstance(bad, dict) else ''}.*{said.split('(')[0]}"):
            encode(bad, {"val/loss": 4.0})


def test_a_workloads_own_grouping_is_kept_whole():
    """A response recomputed without each of the workload's own groups (4 of 100 items, where the
    engine would form 16 of per-item values), one of them undefined (None): every group comes
    back, the undefined one NaN, so that a reader takes G = 4 from the record."""
    cols = encode({"val/ece": {"items": 100, "without": [0.1, None, 0.3, 0.4]}}, {})
    doc = json.loads(json.dumps(document(cols)))
    assert doc["jackknife"]["val/ece"] == [0.1, None, 0.3, 0.4] and doc["items"]["val/ece"] == 100
    back = columns(doc)
    assert [k for k in back if "@g" in k] == [f"jack/val/ece@g{g}" for g in range(4)] and math.isnan(back["jack/val/ece@g1"])
    with pytest.raises(ValueError, match="5 jackknife groups for 4 items"):
        columns({**doc, "jackknife": {"val/ece": [0.1] * 5}, "items": {"val/ece": 4}})


def test_a_last_group_left_undefined_reaches_the_store_and_counts(tmp_path):
    """A trial's report whose last group's removal left the response undefined (NaN): what the
    tracker and `trials recover` log keeps that column (`loggable`), so the run's items hold
    every group and a reader counts G = 4, not 3; a metric's NaN (not measured yet) and a step
    already logged are left out."""
    from analysis.variance import groups_of

    cols = encode({"val/ece": {"items": 40, "without": [0.7, 0.71, 0.69, None]}}, {})
    result = {"step": 3, "val/ece": 0.7, "val/acc": float("nan"), "old/x": 1.0, **cols}
    got = loggable(result, 3, {"old/x": 3})
    assert "val/acc" not in got and "old/x" not in got and math.isnan(got["jack/val/ece@g3"])
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    _, (a, _) = _sweep(client)
    log_metrics(client, a, got, 3)
    read = run_items(client, client.get_run(a))
    assert groups_of(pd.DataFrame([read]), "val/ece") == 4 and math.isnan(read["jack/val/ece@g3"])


def test_the_artifact_holds_every_item_column_and_gives_them_back():
    cols = {"jack/tf/accept@1@g0": 0.25, "jack/tf/accept@1@g1": 0.5, "jack/val/bpb@n": 2.0,
            "split/spec/tau@g0": 3.0, "split/prompts": 24.0, "split/decode_s_per_prompt": 0.5}
    doc = document(cols)
    assert doc["format"] == FORMAT and doc["jackknife"] == {"tf/accept@1": [0.25, 0.5]}  # '@' in a name is kept
    assert doc["evaluation"] == {"prompts": 24.0, "decode_s_per_prompt": 0.5} and doc["groups"] == {"spec/tau": [3.0]}
    assert columns(json.loads(json.dumps(doc))) == cols
    # a group whose removal left the response undefined keeps its column, NaN: a reader counts every group
    assert math.isnan(columns(document({"jack/x@g0": 1.0, "jack/x@g1": float("nan")}))["jack/x@g1"])
    with pytest.raises(ValueError, match="not an item column"):
        document({"val/bpb": 1.0})
    with pytest.raises(ValueError, match="not a trials-items/1 document"):
        columns({"jackknife": {}})


def _sweep(client) -> tuple[str, list[str]]:
    eid = client.create_experiment("items")
    parent = client.create_run(eid, tags={SWEEP_PARENT_TAG: "true"})
    client.set_terminated(parent.info.run_id, "FINISHED")
    ids = []
    for i in range(2):
        run = client.create_run(eid, tags={TRIAL_KEY_TAG: f"k{i}", "factor.head": ["markov", "rnn"][i],
                                           "mlflow.parentRunId": parent.info.run_id})
        ids.append(run.info.run_id)
    return eid, ids


def test_a_run_keeps_its_items_in_one_artifact_merged_per_response_and_the_frame_reads_them(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    _, (a, b) = _sweep(client)
    four = {f"jack/val/bpb@g{g}": 2.0 + g / 10 for g in range(4)}
    log_metrics(client, a, {"val/bpb": 2.15, **four, "split/eval_batches": 4.0}, 1)
    log_metrics(client, a, {"spec/speedup": 1.5, "jack/spec/speedup@g0": 1.4, "jack/spec/speedup@g1": 1.6}, 2)
    run = client.get_run(a)
    assert set(run.data.metrics) == {"val/bpb", "spec/speedup"}  # no jack/ or split/ metric
    assert [f.path for f in client.list_artifacts(a)] == [ITEMS_FILE] and run.data.tags[ITEMS_TAG] == FORMAT
    assert run_items(client, run) == {**four, "split/eval_batches": 4.0, "jack/spec/speedup@g0": 1.4,
                                      "jack/spec/speedup@g1": 1.6}  # the second evaluation merged in
    # a re-evaluation on fewer groups replaces the response's groups as a whole
    log_metrics(client, a, {"jack/val/bpb@g0": 9.0, "jack/val/bpb@g1": 8.0, "split/eval_batches": 2.0}, 3)
    now = run_items(client, client.get_run(a))
    assert now["jack/val/bpb@g1"] == 8.0 and "jack/val/bpb@g2" not in now and now["jack/spec/speedup@g1"] == 1.6
    # a run recorded before the artifact holds its items as metrics: they read as the same columns
    client.log_batch(b, metrics=[__import__("mlflow").entities.Metric("jack/val/bpb:g0", 7.0, 0, 1)])
    for rid in (a, b):
        client.set_terminated(rid, "FINISHED")
    df = load_runs("items", uri).runs.set_index("head")
    assert df.loc["markov", "jack/val/bpb@g1"] == 8.0 and df.loc["rnn", "jack/val/bpb@g0"] == 7.0
    assert df.loc["markov", "split/eval_batches"] == 2.0


def test_an_unreadable_artifact_is_one_line_naming_the_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    _, (a, _) = _sweep(client)
    log_metrics(client, a, {"jack/val/bpb@g0": 1.0, "jack/val/bpb@g1": 2.0}, 1)
    stored = Path(client.get_run(a).info.artifact_uri) / ITEMS_FILE
    stored.write_text("{not json")
    with pytest.raises(StoreReadError, match=f"run {a}: {ITEMS_FILE}: ") as e:
        run_items(client, client.get_run(a))
    assert "\n" not in str(e.value)
    stored.unlink()
    with pytest.raises(StoreReadError, match=f"run {a}: tagged {ITEMS_TAG} but it has no {ITEMS_FILE}"):
        run_items(client, client.get_run(a))


def test_damaged_items_are_one_line_naming_the_run_and_the_response(tmp_path):
    """Values given as text ("1e308"), NaN or inf, a count that is no integer, a jackknife with
    more groups than the count gives, JSON nested 100,000 deep, a file of 9 MB:
    refused in one line naming the run (each was once read into an interval, or raised a
    RecursionError, or took 13 s and 1.46 GB)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    _, (a, _) = _sweep(client)
    log_metrics(client, a, {f"jack/val/bpb@g{g}": 2.0 + g / 10 for g in range(4)} | {"jack/val/bpb@n": 4.0}, 1)
    stored = Path(client.get_run(a).info.artifact_uri) / ITEMS_FILE
    good = json.loads(stored.read_text())
    assert len(run_items(client, client.get_run(a))) == 5
    # a last group its removal leaves undefined (AUROC of one prompt's records) is not damage: it keeps its
    # place, NaN, so that the reader counts every group the workload formed
    log_metrics(client, a, {"jack/conf/auroc_mean@g0": 0.9, "jack/conf/auroc_mean@g1": float("nan"),
                            "jack/conf/auroc_mean@n": 2.0}, 2)
    read = run_items(client, client.get_run(a))
    assert read["jack/conf/auroc_mean@g0"] == 0.9 and math.isnan(read["jack/conf/auroc_mean@g1"])
    good = json.loads(stored.read_text())
    assert good["jackknife"]["conf/auroc_mean"] == [0.9, None]
    bad = {"text": ({**good, "jackknife": {"val/bpb": [2.0, "1e308", 2.2, 2.3]}}, "'1e308' is not a finite number"),
           "inf": ({**good, "jackknife": {"val/bpb": [2.0, 1e999, 2.2, 2.3]}}, "is not a finite number"),
           "count": ({**good, "items": {"val/bpb": 2.5}}, "a count of 2.5"),
           "groups": ({**good, "items": {"val/bpb": 3}}, "4 jackknife groups for 3 items")}
    for name, (doc, match) in bad.items():
        stored.write_text(json.dumps(doc))
        with pytest.raises(StoreReadError, match=f"run {a}: {ITEMS_FILE}: .*{match}") as e:
            run_items(client, client.get_run(a))
        assert "\n" not in str(e.value), name
    stored.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(StoreReadError, match="nested deeper than"):
        run_items(client, client.get_run(a))
    stored.write_text(" " * (9 * 1024 * 1024))
    with pytest.raises(StoreReadError, match="past 8,388,608; not read"):
        run_items(client, client.get_run(a))


def test_the_committed_exports_still_carry_their_item_records():
    """Exports written before the artifact hold the item columns under the old names; the
    statistics read the same records from them (the seed's questions: a jackknife over the
    held-out batches for val/bpb)."""
    sweep = read_parquet(ROOT / "results" / "seed-questions" / "runs.parquet")
    got = item_records(sweep.runs, "val/bpb", sweep.registry)  # its record's rows say where its items are
    assert got is not None and got.groups >= 2 and got.pseudo.shape[0] == len(sweep.runs)
    full = pd.to_numeric(sweep.runs["val/bpb"]).to_numpy()
    assert np.allclose(got.pseudo.mean(axis=1), full, rtol=1e-6)  # pseudo-values average to the response


def test_items_are_bound_to_their_run_and_the_values_logged_with_them(tmp_path):
    """Another run's items.json copied in is refused naming both runs; items logged with a
    value that is not the run's value now are not used (issue 61: both were read into
    intervals silently); a re-evaluation that logs new values and items together reads."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    _, (a, b) = _sweep(client)
    four = {f"jack/val/bpb@g{g}": 2.0 + g / 10 for g in range(4)}
    log_metrics(client, a, {"val/bpb": 2.15, **four, "jack/val/bpb@n": 4.0}, 1)
    log_metrics(client, b, {"val/bpb": 2.30}, 1)
    stored = Path(client.get_run(a).info.artifact_uri) / ITEMS_FILE
    doc = json.loads(stored.read_text())
    assert doc["run"] == a and doc["values"] == {"val/bpb": 2.15}
    copied = Path(client.get_run(b).info.artifact_uri) / ITEMS_FILE
    copied.parent.mkdir(parents=True, exist_ok=True)
    copied.write_text(stored.read_text())
    client.set_tag(b, ITEMS_TAG, doc["format"])
    with pytest.raises(StoreReadError, match=f"run {b}: {ITEMS_FILE}: not this run's items: it is run {a}'s"):
        run_items(client, client.get_run(b))
    # relabelled, its items describe val/bpb = 2.15, not b's 2.30 (as after a re-measure without items): none
    copied.write_text(json.dumps({**doc, "run": b}))
    assert run_items(client, client.get_run(b)) == {}
    log_metrics(client, a, {"val/bpb": 2.5, **{k: v + 0.4 for k, v in four.items()}}, 2)  # a re-evaluation
    assert run_items(client, client.get_run(a))["jack/val/bpb@g0"] == pytest.approx(2.4)
    assert json.loads(stored.read_text())["values"] == {"val/bpb": 2.5}
    # another response's items merged in keep val/bpb's binding: re-measured without items, its
    # old items are stale still (a merge once dropped every earlier response's value)
    log_metrics(client, a, {"spec/speedup": 1.5, "jack/spec/speedup@g0": 1.4, "jack/spec/speedup@g1": 1.6}, 3)
    assert json.loads(stored.read_text())["values"] == {"val/bpb": 2.5, "spec/speedup": 1.5}
    log_metrics(client, a, {"val/bpb": 2.7}, 4)
    read = run_items(client, client.get_run(a))
    assert "jack/val/bpb@g0" not in read and read["jack/spec/speedup@g1"] == 1.6


def test_items_over_another_count_than_their_evaluations_are_refused_naming_the_run(tmp_path):
    """A response's item count must be the evaluation count its registry row says its items
    are drawn on (val/bpb: the held-out batches, `split/eval_batches`): items.json's count
    edited, or a parquet export's, is refused in one line naming the run (issue 61: a wrong
    item count was accepted); a count that agrees reads."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    _, (a, b) = _sweep(client)
    for rid in (a, b):
        log_metrics(client, rid, {"val/bpb": 2.15, **{f"jack/val/bpb@g{g}": 2.0 + g / 10 for g in range(4)},
                                  "jack/val/bpb@n": 4.0, "split/eval_batches": 4.0}, 1)
        client.set_terminated(rid, "FINISHED")
    sweep = load_runs("items", uri)
    assert list(sweep.runs["jack/val/bpb@n"]) == [4.0, 4.0]
    stored = Path(client.get_run(b).info.artifact_uri) / ITEMS_FILE
    doc = json.loads(stored.read_text())
    stored.write_text(json.dumps({**doc, "items": {"val/bpb": 12}}))  # 12 items still give 12 >= 4 groups
    with pytest.raises(StoreReadError, match=f"run {b} .*items of 'val/bpb' are over 12 items, but its evaluation "
                                             r"counted 4 \(split/eval_batches\)") as e:
        load_runs("items", uri)
    assert "\n" not in str(e.value)
    path = tmp_path / "runs.parquet"
    runs = sweep.runs.copy()
    runs.loc[runs["run_id"] == a, "jack/val/bpb@n"] = 8.0
    to_parquet(sweep.with_runs(runs), path)
    with pytest.raises(ValueError, match=f"parquet: .*run {a} .*over 8 items, but its evaluation counted 4"):
        read_parquet(path)
    runs.loc[runs["run_id"] == a, "jack/val/bpb@n"] = 4.0
    runs.loc[runs["run_id"] == a, "jack/val/bpb@g2"] = float("inf")  # undefined is NaN; infinite is damage
    to_parquet(sweep.with_runs(runs), path)
    with pytest.raises(ValueError, match=r"item column 'jack/val/bpb@g2' holds 1 infinite value\(s\)"):
        read_parquet(path)


def test_a_registry_row_declares_the_count_its_items_are_drawn_on():
    """The statistics read a response's item kind from its row (`items`), not from its name:
    a recorded registry keeps the declaration, and a declared row wins over the name's prefix."""
    from analysis.item_kinds import kind_of
    from trials.registry import Registry, from_record, recorded
    from trials.workload import load_workload

    rules = load_workload("dspark").registry
    assert rules.item_count("spec/tau") == "split/prompts" and rules.item_count("val/bpb") == "split/eval_batches"
    assert rules.item_count("spec/speedup") == "timing/prompts" and rules.item_count("train/step_ms") == ""
    kept = recorded(rules, ["spec/tau", "tf/accept@2"])
    assert kept["metrics"]["tf/accept@2"]["items"] == "split/eval_batches"
    assert from_record(kept).item_count("spec/tau") == "split/prompts"
    own = from_record({"metrics": {"spec/x": {"better": "higher", "items": "split/eval_batches"}}})
    assert kind_of("spec/x", own) == "eval_batches" and kind_of("spec/x", Registry(own.metrics)) == "eval_batches"
    assert kind_of("spec/y", own) == ""  # undeclared: its own items; a name says nothing
    with pytest.raises(ValueError, match="registry.metrics.spec/x: a metric row"):
        from_record({"metrics": {"spec/x": {"items": 3}}})
