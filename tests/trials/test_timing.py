"""`trials time`: the round-robin schedule (no Ray), and the timing pass of tiny drafter- and
backbone-stage sweeps on real Ray and a real MLflow SQLite store, with its refusals; and, on
the drafter sweep, `trials recover` rebuilding the passes, a re-evaluation and a look."""

import json
import os
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trials import runner, validate
from trials.reeval import reeval
from trials.store.keys import PASS_TAG, SUMMARY_TAG, reeval_tag
from trials.store.reader import run_items
from dspark.timed import values
from trials.timing.timing_pass import round_order, schedule, time_sweep
from trials.timing.timing_settings import TimingSettings
from tests.trials.conftest import D1_D9, write_spec

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = {"target_steps": 8, "draft_steps": 6, "eval_interval": 3, "eval_batches": 1, "spec_prompts": 2,
           "spec_new_tokens": 16, "spec_prompt_len": 16, "max_corpus_bytes": 300_000, "spec_interval_prompts": 0}
BACKBONE = {"parallel_stage": "backbone", "head": "rnn", "block_size": 4, "aux_weight": 0.1, "anchors": "strided",
            "stride": 16, "target_steps": 6, "eval_interval": 3, "eval_batches": 1, "spec_prompts": 0,
            "seq_len": 64, "max_corpus_bytes": 300_000}


def test_schedule_times_every_run_once_a_round_after_its_warmups_in_seeded_orders():
    keys = [f"k{i}" for i in range(5)]
    events = schedule(keys, rounds=4, warmup=2, seed=7)
    assert len(events) == 4 * 5 * 3
    for k in range(4):
        mine = [(key, timed) for r, key, timed in events if r == k]
        timed = [key for key, t in mine if t]
        assert sorted(timed) == keys and timed == round_order(keys, 7, k)  # every run once, in the round's order
        for i, (key, t) in enumerate(mine):  # each timed repetition right after W untimed ones of the same run
            if t:
                assert mine[i - 2:i] == [(key, False), (key, False)]
        assert len(mine) == 15
    assert [r for r, *_ in events] == sorted(r for r, *_ in events)  # round by round
    assert schedule(keys, 4, 2, 7) == events  # reproducible from the seed
    orders = [round_order(keys, 7, k) for k in range(4)]
    assert len({tuple(o) for o in orders}) > 1  # a fresh order each round
    assert [round_order(keys, 8, k) for k in range(4)] != orders  # another seed, other orders
    assert schedule(keys, 2, 0, 7) == [(k, key, True) for k in range(2) for key in orders[k]]


def test_settings_refuse_out_of_range_values_and_values_summarise_raw_times():
    for bad, flag in ((dict(rounds=1), "--rounds"), (dict(rounds=2), "--rounds: an integer >= 3"), (dict(warmup=-1), "--warmup"), (dict(prompts=0), "--prompts"),
                      (dict(steps=0), "--steps"), (dict(rounds=True), "--rounds"), (dict(seed=1.5), "--seed")):
        with pytest.raises(ValueError, match=flag):
            TimingSettings(**bad)
    rounds = [{"times": {"a": {"ar_s": [1.0, 2.0], "spec_s": [0.5, 0.5]}}},
              {"times": {"a": {"ar_s": [3.0, 0.0], "spec_s": [1.0, 2.0]}}}]
    assert values("drafter", rounds) == {"a": pytest.approx(6.0 / 4.0)}  # ratio of sums, not mean of ratios
    steps = [{"times": {"a": {"step_s": [0.01, 0.03]}}}, {"times": {"a": {"step_s": [0.02]}}}]
    assert values("backbone", steps) == {"a": pytest.approx(20.0)}


def test_kept_records_round_trip_and_a_crafted_one_is_refused_naming_its_file(tmp_path):
    """What `trials recover` replays from storage is input: each bad record is one line
    naming its file, before anything is written to the store."""
    from trials.store.kept import keep_parent_record, keep_run_record, key_dir, read_records

    keep_run_record(tmp_path, "D1=a|r0", "reeval", 7, {"spec/tau": 2.5, "x/nan": float("nan")}, {"reeval.n": "4"},
                    {"eval/per_prompt_4.json": b"[1]"})
    keep_parent_record(tmp_path, "timing", {"timing": "{}"}, artifacts={"timing/pass.json": b"{}"})
    keep_parent_record(tmp_path, "look", {"look.1": "x"}, {"augment/undecided": 2}, step=1)
    runs, parents = read_records(tmp_path, ["D1=a|r0", "D1=b|r0"])
    assert [(r["trial_key"], r["step"], r["metrics"], r["tags"]) for r in runs] == [
        ("D1=a|r0", 7, {"spec/tau": 2.5}, {"reeval.n": "4"})]  # NaN is not measured: not kept
    assert runs[0]["files"]["eval/per_prompt_4.json"].read_bytes() == b"[1]"
    assert [p["kind"] for p in parents] == ["timing", "look"]  # in the order written
    record = next(key_dir(tmp_path, "D1=a|r0").glob("*.json"))
    good = record.read_text()
    for bad, says in (("{", "unreadable, or not JSON"), (good.replace('"step": 7', '"step": -1'), "step:"),
                      (good.replace('"eval/per_prompt_4.json"]', '"../../x"]'), "artifacts:"),
                      (good.replace('"spec/tau": 2.5', '"spec/tau": "2.5"'), "metrics:"),
                      (good.replace("D1=a|r0", "D1=b|r0"), "trial_key:")):
        record.write_text(bad)
        with pytest.raises(ValueError, match=f"^recover: {re.escape(str(record))}: not a kept record \\({says}"):
            read_records(tmp_path, ["D1=a|r0", "D1=b|r0"])
    record.write_text(good)
    (key_dir(tmp_path, "D1=a|r0") / record.stem / "eval" / "per_prompt_4.json").unlink()
    with pytest.raises(ValueError, match="its artifact file .*per_prompt_4.json is missing"):
        read_records(tmp_path, ["D1=a|r0"])
    with pytest.raises(ValueError, match=f"^recover: {re.escape(str(key_dir(tmp_path, 'D1=a|r0')))}: not a trial "):
        read_records(tmp_path, ["D1=b|r0"])


def _kids(uri, name):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    runs = c.search_runs([exp.experiment_id], "", max_results=1000)
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == "true")
    return c, parent, [r for r in runs if "trial_key" in r.data.tags]


def _pass_file(client, parent, tmp_path) -> dict:
    return json.loads(Path(client.download_artifacts(parent.info.run_id, "timing/pass.json", str(tmp_path))).read_text())


def test_time_drafter_sweep_interleaves_rounds_logs_each_run_and_the_pass(ray_local, tmp_path, corpus_dir, capsys):
    uri, storage = f"sqlite:///{tmp_path / 'm.db'}", str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "timed", D1_D9, base=DRAFTER,
                                   responses={"spec/speedup": {"better": "higher", "margin": 0.05}}))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    said = []
    rec = time_sweep("timed", storage, settings=TimingSettings(rounds=3, warmup=1, prompts=2, seed=0),
                     say=said.append)
    client, parent, runs = _kids(uri, "timed")
    keys = sorted(r.data.tags["trial_key"] for r in runs)
    assert len(keys) == 4 and sorted(rec["values"]) == keys
    assert [m.group(0) for m in map(re.compile(r"round \d/\d timed").search, said) if m] == \
        [f"round {k}/3 timed" for k in (1, 2, 3)]  # one progress line a round
    for r in runs:
        key, m = r.data.tags["trial_key"], r.data.metrics
        assert m["spec/speedup"] == pytest.approx(rec["values"][key]) and m["spec/speedup"] > 0
        assert m["timing/rounds"] == 3 and m["timing/prompts"] == 2 and r.data.tags[PASS_TAG] == rec["id"]
        last = max(h.step for h in client.get_metric_history(r.info.run_id, "tf/tau"))
        assert [h.step for h in client.get_metric_history(r.info.run_id, "spec/speedup")] == [last + 1]
        assert "spec/speedup_sweep" in m  # the sweep's own figure stays beside it
    tag = json.loads(parent.data.tags[SUMMARY_TAG])
    assert tag["id"] == rec["id"] and tag["node"] == socket.gethostname() and tag["response"] == "spec/speedup"
    assert (tag["rounds"], tag["warmup"], tag["prompts"], tag["seed"]) == (3, 1, 2, 0) and tag["seconds"] > 0
    raw = _pass_file(client, parent, tmp_path)
    assert raw["orders"] == [round_order(keys_in_spec(spec, keys), 0, k) for k in range(3)]
    assert len({tuple(o) for o in raw["orders"]}) > 1  # the orders differ between rounds
    for k, times in enumerate(raw["times"]):  # every run once a round, every prompt timed both ways
        assert sorted(times) == keys and all(len(t["ar_s"]) == len(t["spec_s"]) == 2 for t in times.values())
    for key in keys:
        ar = sum(sum(t[key]["ar_s"]) for t in raw["times"])
        assert rec["values"][key] == pytest.approx(ar / sum(sum(t[key]["spec_s"]) for t in raw["times"]))
    _bench(uri, capsys)
    # each run is timed once: a second pass with nothing new times nothing and writes nothing
    assert time_sweep("timed", storage, settings=TimingSettings(rounds=3, warmup=0, prompts=1, seed=1),
                      say=said.append) is None
    assert "every finished run is timed already" in said[-1] and "--again" in said[-1]
    client, parent, runs = _kids(uri, "timed")
    assert json.loads(parent.data.tags[SUMMARY_TAG])["id"] == rec["id"]
    assert all(len(client.get_metric_history(r.info.run_id, "spec/speedup")) == 1 for r in runs)
    # a block with a run no pass timed (here: one run's tag removed) is timed whole, every arm
    from trials.timing.timing_pass import untimed_blocks

    lone = runs[0]
    client.delete_tag(lone.info.run_id, PASS_TAG)
    by_key = {r.data.tags["trial_key"]: client.get_run(r.info.run_id) for r in runs}
    block = int(lone.data.tags["replicate"])
    assert sorted(t.key for t in untimed_blocks(list(spec.trials), by_key)) == sorted(
        t.key for t in spec.trials if t.replicate == block)
    by_key = {k: r for k, r in by_key.items() if k != lone.data.tags["trial_key"]}
    assert untimed_blocks([t for t in spec.trials if t.key in by_key], by_key) == []
    client.set_tag(lone.info.run_id, PASS_TAG, rec["id"])
    again = time_sweep("timed", storage, settings=TimingSettings(rounds=3, warmup=0, prompts=1, seed=1),
                       say=said.append, again=True)  # --again replaces: a new step, a new id
    client, parent, runs = _kids(uri, "timed")
    assert again["id"] != rec["id"] and json.loads(parent.data.tags[SUMMARY_TAG])["id"] == again["id"]
    for r in runs:
        hist = client.get_metric_history(r.info.run_id, "spec/speedup")
        assert len(hist) == 2 and hist[0].step < hist[1].step and r.data.metrics["timing/rounds"] == 3
        assert r.data.metrics["spec/speedup"] == pytest.approx(again["values"][r.data.tags["trial_key"]])
    _refusals(tmp_path, uri, storage, client, runs)
    _recover_rebuilds_what_the_store_held(tmp_path, uri, storage)


def _recover_rebuilds_what_the_store_held(tmp_path, uri, storage):
    """On the same sweep, `trials reeval` and a look; then the store deleted and `trials
    recover`: every metric point, tag and artifact that the re-evaluation, the two passes
    and the look wrote is back as the store held it. Recover once said "4 of 4 trials
    finished" with all of them gone, and the analysis fell back to the sweep's own figures."""
    from analysis.sweep_reader import load_runs
    from analysis.publish import record_look
    from analysis.sequential import Plan
    from trials.cli import main

    assert reeval("timed", storage, {"spec_prompts": 4}, say=lambda s: None) == {"done": 4, "skipped": 0, "refused": []}
    record_look(load_runs("timed", uri), uri, Plan(3, 0.05).to_json(), "look 1 (the test's)", 1)
    before = _held(uri, tmp_path / "before")
    assert before["parent"]["tags"]["look.1"] == "look 1 (the test's)" and before["parent"]["pass.json"]
    # the store lost: rebuilt into a new one (this process's MLflow keeps the old file's connection open)
    rebuilt = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    assert main(["recover", "timed", "--storage", storage, "--tracking-uri", rebuilt]) == 0
    after = _held(rebuilt, tmp_path / "after")
    assert after == before
    for key, held in after.items():
        if key != "parent":  # the re-evaluation and the second pass are each run's latest
            assert held["tags"][reeval_tag("spec_prompts")] == "4" and set(held["eval"]) == {"eval/per_prompt_4.json",
                                                                         "eval/rounds_4.npz"}
            assert len(held["points"]["spec/speedup"]) == 2 and held["items"]["split/prompts"] == 4.0
            # the second pass timed 1 prompt (no items): the first pass's items describe a value the
            # run no longer holds, and stay unread through the re-evaluation's merge and the rebuild
            assert "jack/spec/speedup@g0" not in held["items"] and "jack/spec/tau@g3" in held["items"]
    assert set(load_runs("timed", rebuilt).runs["split/prompts"]) == {4.0}


def _held(uri, dest) -> dict:
    """What the store holds of the sweep's later records: each run's every metric point,
    its re-evaluation and pass tags and its eval/ artifacts; the parent's timing and
    sequential tags and timing/pass.json."""
    client, parent, runs = _kids(uri, "timed")

    def content(run_id, path):
        return Path(client.download_artifacts(run_id, path, str(dest))).read_bytes()

    out = {"parent": {"tags": {k: parent.data.tags.get(k) for k in (SUMMARY_TAG, "sequential", "look.1")},
                      "pass.json": content(parent.info.run_id, "timing/pass.json")}}
    for r in runs:
        run_id = r.info.run_id
        out[r.data.tags["trial_key"]] = {
            "tags": {k: r.data.tags.get(k) for k in (reeval_tag("spec_prompts"), PASS_TAG)},
            "points": {m: sorted((h.step, h.value) for h in client.get_metric_history(run_id, m))
                       for m in r.data.metrics},
            "eval": {a.path: content(run_id, a.path) for a in client.list_artifacts(run_id, "eval")},
            "items": run_items(client, r)}
    return out


def _store_for(tmp_path, storage_copy) -> str:
    """A copy of the store whose sweep records `storage_copy` as its storage: one sweep per
    name per store, and the original store's sweep lives in the original storage."""
    from trials.store.keys import STORAGE_TAG, sweep_parent

    db = tmp_path / f"{Path(storage_copy).name}.db"
    shutil.copy(tmp_path / "m.db", db)
    client = MlflowClient(f"sqlite:///{db}")
    parent = sweep_parent(client, client.get_experiment_by_name("timed").experiment_id)
    client.set_tag(parent.info.run_id, STORAGE_TAG, str(Path(storage_copy).resolve()))
    return f"sqlite:///{db}"


def _bench(uri, capsys):
    """bench/timing_pass.py on the sweep: both residual sigmas of the factorial model. With
    2 x 2 cells and one replicate the model is the main effects, its one residual df the
    interaction, so sigma = |y_aa - y_ab - y_ba + y_bb| / 2 for either response."""
    from analysis.sweep_reader import load_runs

    df = load_runs("timed", uri).runs
    assert df["spec/speedup"].notna().all()  # the analysis reads the pass's values
    bench = runpy.run_path(str(ROOT / "bench" / "timing_pass.py"))
    capsys.readouterr()
    assert bench["main"](["timed", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    (row,) = bench["residual_sigmas"](df, ["D1", "D9"])
    cells = {r: df.groupby(["D1", "D9"], observed=True)[r].mean().to_numpy() for r in (row["timed"], row["sweep"])}
    sigma = {r: abs(y[0] - y[1] - y[2] + y[3]) / 2 for r, y in cells.items()}
    assert (row["timed"], row["sweep"], row["df"], row["runs"]) == ("spec/speedup", "spec/speedup_sweep", 1, 4)
    assert row["sigma_pass"] == pytest.approx(sigma["spec/speedup"])
    assert row["sigma_sweep"] == pytest.approx(sigma["spec/speedup_sweep"])
    assert f"ratio pass / sweep  {row['ratio']:.3f}" in out and "residual df 1" in out
    assert "re-evaluation" not in out  # one point per run: the trials' own figure
    # a re-evaluation times `spec/speedup_sweep` again (a later point): the bench names both figures,
    # the trials' own from each run's first point
    from mlflow.tracking import MlflowClient

    again = Path(uri.removeprefix("sqlite:///")).with_suffix(".again.db")
    shutil.copy(uri.removeprefix("sqlite:///"), again)
    client = MlflowClient(f"sqlite:///{again}")
    for i, rid in enumerate(df["run_id"]):
        client.log_metric(rid, "spec/speedup_sweep", 1.0 + 0.1 * i * i, step=10_000)
    assert bench["main"](["timed", "--tracking-uri", f"sqlite:///{again}"]) == 0
    out = capsys.readouterr().out
    first = f"timed while they trained: {row['sigma_sweep']:.4g}, ratio pass / that"
    assert "spec/speedup_sweep is the re-evaluation's" in out and first in out, out


def keys_in_spec(spec, keys):
    """The finished trials' keys in the spec's order (the order the pass starts from)."""
    return [t.key for t in spec.trials if t.key in keys]


def _refusals(tmp_path, uri, storage, client, runs):
    """Each refusal is one line before any work, and starts no Ray (checked in a fresh
    process, since this one holds the tests' Ray)."""
    no_ckpt, no_target = shutil.copytree(storage, tmp_path / "st2"), shutil.copytree(storage, tmp_path / "st3")
    for d in (no_ckpt / "timed").glob("*/checkpoint_*"):
        shutil.rmtree(d)
    shutil.rmtree(no_target / "targets")
    failed = tmp_path / "failed.db"
    shutil.copy(tmp_path / "m.db", failed)
    fc = MlflowClient(f"sqlite:///{failed}")
    for r in runs:
        fc.set_terminated(r.info.run_id, "FAILED")
    cases = {"no sweep 'nosuch'": ["nosuch", "--storage", storage],
             "--rounds": ["timed", "--storage", storage, "--rounds", "1"],
             "--warmup": ["timed", "--storage", storage, "--warmup", "-1"],
             "--prompts": ["timed", "--storage", storage, "--prompts", "0"],
             "--steps": ["timed", "--storage", storage, "--steps", "0"],
             "have no checkpoint": ["timed", "--storage", str(no_ckpt), "--tracking-uri",
                                    _store_for(tmp_path, no_ckpt)],
             "shared target": ["timed", "--storage", str(no_target), "--tracking-uri",  # every run timed: --again
                               _store_for(tmp_path, no_target), "--again"],
             "no finished trial": ["timed", "--storage", storage, "--tracking-uri", f"sqlite:///{failed}"]}
    code = ("import contextlib, io, json, sys\nfrom trials.cli import main\nout = {}\n"
            "for what, argv in json.loads(sys.argv[1]).items():\n"
            "    err = io.StringIO()\n"
            "    with contextlib.redirect_stderr(err):\n"
            "        out[what] = [main(['time', *argv]), err.getvalue()]\n"
            "ray = sys.modules.get('ray')\n"
            "print(json.dumps({'cases': out, 'ray': bool(ray and ray.is_initialized())}))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["ray"] is False, proc.stderr
    for what, (rc, err) in got["cases"].items():
        assert rc == 2 and err.count("\n") == 1 and err.startswith("trials: error: ") and what in err, (what, err)
    for r in runs:  # nothing written by a refused pass
        assert client.get_run(r.info.run_id).data.metrics["timing/rounds"] == 3


def test_time_backbone_sweep_times_steps_from_each_config_without_checkpoints(ray_local, tmp_path, corpus_dir):
    uri, storage = f"sqlite:///{tmp_path / 'm.db'}", str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "b.yaml", corpus_dir, "steps", {"D9": D1_D9["D9"]}, base=BACKBONE,
                                   controls={"pure_ce": {"aux_weight": 0.0}},
                                   responses={"train/step_ms": {"better": "lower", "margin": 12}}))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    for d in (tmp_path / "st" / "steps").glob("*/checkpoint_*"):  # the step is the config's: no weights needed
        shutil.rmtree(d)
    rec = time_sweep("steps", storage, settings=TimingSettings(rounds=3, warmup=1, steps=3, seed=0), say=lambda s: None)
    client, parent, runs = _kids(uri, "steps")
    assert len(runs) == 3 and rec["response"] == "train/step_ms"
    for r in runs:
        m = r.data.metrics
        assert m["train/step_ms"] == pytest.approx(rec["values"][r.data.tags["trial_key"]]) and m["train/step_ms"] > 0
        assert m["timing/rounds"] == 3 and m["timing/steps"] == 3 and "train/step_ms_sweep" in m
    raw = _pass_file(client, parent, tmp_path)
    assert [sorted(o) for o in raw["orders"]] == [sorted(rec["values"])] * 3
    assert all(len(t["step_s"]) == 3 for times in raw["times"] for t in times.values())
    assert json.loads(parent.data.tags[SUMMARY_TAG])["steps"] == 3
    # SIGTERM mid-pass (a service manager, `timeout`): nothing recorded, exit 143, the line to run it again
    proc = subprocess.Popen([sys.executable, "-m", "trials.cli", "time", "steps", "--storage", storage, "--again",
                             "--rounds", "200", "--steps", "20"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    said = ""
    while "round 1/200 timed" not in said and proc.poll() is None:  # inside the pass: Ray up, rounds under way
        said += proc.stdout.readline()
    assert "timing 3 run(s)" in said, said
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err[-3000:]
    assert err.rstrip().splitlines()[-1] == f"  trials time steps --storage {tmp_path / 'st'}", err[-3000:]
    assert "Traceback" not in err and "*** SIG" not in err, err[-3000:]
    assert json.loads(_kids(uri, "steps")[1].data.tags[SUMMARY_TAG])["id"] == rec["id"]  # nothing new recorded


def test_the_speedup_jackknife_leaves_out_each_group_of_timing_prompts():
    from dspark.timed import items, values
    from trials.store.items import encode_each

    rounds = [{"times": {"a": {"ar_s": [1.0, 2.0, 3.0], "spec_s": [0.5, 1.0, 2.0]}}},
              {"times": {"a": {"ar_s": [1.1, 2.1, 3.1], "spec_s": [0.6, 1.1, 2.1]}}}]
    assert values("drafter", rounds)["a"] == pytest.approx((6.0 + 6.3) / (3.5 + 3.8))
    got = items("drafter", rounds)["a"]["spec/speedup"]
    assert got["items"] == 3 and len(got["without"]) == 3  # G = 3 prompts
    assert got["without"][1] == pytest.approx((1.0 + 3.0 + 1.1 + 3.1) / (0.5 + 2.0 + 0.6 + 2.1))
    cols = encode_each(items("drafter", rounds))["a"]  # what the pass records and logs
    assert set(cols) == {"jack/spec/speedup@g0", "jack/spec/speedup@g1", "jack/spec/speedup@g2", "jack/spec/speedup@n"}
    assert items("backbone", [{"times": {"a": {"step_s": [0.1]}}}]) == {}
    one = [{"times": {"a": {"ar_s": [1.0], "spec_s": [0.5]}}}]
    assert items("drafter", one) == {}  # one prompt forms no groups


def test_a_round_run_on_a_busy_machine_is_named_and_a_quiet_pass_is_not():
    """Per run, each round's value from that round alone; one that departs from the run's
    median round by more than half of it is named (look 2 of head-and-block: one run's round
    read 11.1 against 0.98, and its speedup 3.27 went into the look unremarked)."""
    from dspark.workload import Timing
    from trials.timing.timing_pass import BUSY_ROUND, busy_rounds, busy_warning

    def round_(ar_a, ar_b):
        return {"times": {"a": {"ar_s": [ar_a, ar_a], "spec_s": [1.0, 1.0]},
                          "b": {"ar_s": [ar_b, ar_b], "spec_s": [1.2, 1.2]}}}

    quiet = [round_(0.9 + 0.02 * i, 1.0 - 0.03 * i) for i in range(5)]  # within 10% of their medians
    assert busy_rounds(Timing(), "drafter", quiet) == []
    busy = quiet[:3] + [round_(0.95, 11.0)] + quiet[4:]
    found = busy_rounds(Timing(), "drafter", busy)
    assert [(b["run"], b["round"]) for b in found] == [("b", 3)]
    assert found[0]["value"] == pytest.approx(11.0 / 1.2) and abs(found[0]["value"] / found[0]["median"] - 1) > BUSY_ROUND
    line = busy_warning("hb", {"busy": found, "runs": {"a": "arm-a r0", "b": "arm-b r0"}})
    assert line.startswith("hb: warning: 1 run-round(s) of this pass depart from their run's median round by more "
                           "than 50% (worst: arm-b r0 in round 4, 9.17 against 0.808)")
    assert "a load during the pass, or repetitions too short to time steadily" in line
    assert line.endswith("time it again on a quiet machine: trials time hb --again") and "\n" not in line
    # the pass it repeats had its own settings: the printed command times it again with them
    line = busy_warning("hb", {"busy": found, "runs": {"a": "arm-a r0", "b": "arm-b r0"}, "rounds": 3, "warmup": 1,
                               "prompts": 2, "seed": 4})
    assert line.endswith("trials time hb --again --rounds 3 --prompts 2 --seed 4")
    assert busy_rounds(Timing(), "drafter", busy[:2]) == []  # two rounds have no median to stand against


def test_a_pass_with_a_value_that_is_no_time_records_nothing_and_names_the_runs():
    """A NaN, zero or negative step time (a broken clock, a repetition that did nothing) used
    to be recorded, or stamp the pass's id on the previous pass's values."""
    from trials.timing.timing_pass import check_pass

    good = {"runs": {"a": "D1=x r0", "b": "D1=y r0"}, "values": {"a": 16.3, "b": 17.0}}
    check_pass(good, "train/step_ms", "demo")
    for v in (float("nan"), 0.0, -3.0, float("inf"), None):
        with pytest.raises(ValueError) as e:
            check_pass({**good, "values": {"a": 16.3, "b": v}}, "train/step_ms", "demo")
        assert str(e.value) == (f"time: the pass measured no usable train/step_ms (finite and > 0) for 1 run(s), "
                                f"D1=y r0 ({v!r}); nothing is recorded: run `trials time demo` again")


def test_a_sigterm_past_the_last_round_still_ends_on_a_line():
    """Killed just after its last round, `trials time` once exited with no line: the pass put
    Ray's own SIGTERM handler back (sys.exit(15)). Now the handler from before Ray's init is
    put back, and a SIGTERM while the pass is written is held until it is written whole."""
    from trials.timing.timing_pass import SIGTERMED, Terminated, _on_ray, held_sigterm

    ours, rays = (lambda signum, frame: None), (lambda signum, frame: None)
    old = signal.signal(signal.SIGTERM, rays)  # what ray.init leaves
    try:
        assert _on_ray(False, ours, lambda: 7) == 7
        assert signal.getsignal(signal.SIGTERM) is ours
        written = []
        with pytest.raises(Terminated) as e:
            with held_sigterm():
                os.kill(os.getpid(), signal.SIGTERM)
                written.append("whole")  # not cut short by the signal
        assert e.value.recorded and written == ["whole"] and signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, old)
        SIGTERMED.clear()  # this process's record of SIGTERMs: the next test starts with none
