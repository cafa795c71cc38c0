"""Real Ray, real MLflow: smoke sweep, crash recovery, driver interruption, two nodes."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from mlflow.tracking import MlflowClient

from trials import expand, runner, validate
from trials.store.client import tracking_client
from trials.store.reader import run_items
from tests.trials.conftest import D1_D9, write_spec

ROOT = Path(__file__).resolve().parents[2]


def children(uri, name):
    # the project's client: a new SQLite store is first opened under the lock the driver takes
    # too (MLflow creating its tables from two processes at once failed the driver in CI)
    c = tracking_client(uri)
    exp = c.get_experiment_by_name(name)
    runs = c.search_runs([exp.experiment_id], "", max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep_parent") == "true"]
    kids = [r for r in runs if "trial_key" in r.data.tags]
    return c, parents, kids


def test_smoke_sweep_logs_finished_children(ray_local, tmp_path, corpus_dir, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = expand.smoke(validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "smoke", D1_D9)))
    assert spec.name == "smoke-smoke"  # a smoke test never mixes with the real sweep's runs
    out = runner.run(spec, tracking_uri=uri, storage=str(tmp_path / "st"), verbose=2)
    assert out == {**out, "finished": 4, "failed": 0}
    # each factor and the replicate are Tune dimensions: columns in Tune's results and table
    df = out["results"].get_dataframe()
    assert {"config/D1", "config/D9", "config/replicate"} <= set(df.columns)
    assert sorted(zip(df["config/D1"], df["config/D9"])) == sorted(
        (a, b) for a in ("shifted", "aligned") for b in ("hidden", "markov"))
    assert df["tf/tau"].notna().all() and df["spec/tau"].notna().all()
    # Tune keeps its CSV and JSON result files, but writes no TensorBoard events (MLflow has them)
    logged = [d for d in Path(out["storage"]).iterdir() if (d / "progress.csv").is_file() and (d / "result.json").is_file()]
    assert len(logged) == 4
    assert not list(Path(out["storage"]).rglob("events.out.tfevents*"))
    # -v: one line per trial event, by the trial's readable name, with the sweep's progress; none
    # of Tune's own output (its configuration box, its INFO lines)
    said = capsys.readouterr()
    assert "Configuration for experiment" not in said.out + said.err and "View detailed results" not in said.out
    lines = [line for line in said.out.splitlines() if line.startswith("[smoke-smoke ")]
    for t in spec.trials:
        mine = [line for line in lines if line.split("] ", 1)[1].split("  ")[0].endswith(t.run_name)]
        assert any("] started " in line for line in mine) and any("] finished " in line for line in mine), mine
        assert len(mine) <= 10
    assert lines[-1].startswith("[smoke-smoke 4/4 done ") and "spec/tau" in lines[-1]
    c, parents, kids = children(uri, "smoke-smoke")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(kids) == 4
    exp_tags = c.get_experiment_by_name("smoke-smoke").tags
    assert exp_tags["mlflow.experimentKind"] == "custom_model_development"  # opens in the runs view
    # randomised run order: the tag is the trial's launch position, a permutation of 0..3
    # that is not the standard order, seeded by the sweep's name (so a rerun reproduces it)
    order = {r.data.tags["cell"]: int(r.data.tags["run_order"]) for r in kids}
    assert sorted(order.values()) == [0, 1, 2, 3]
    assert order == {t.cell: t.run_order for t in spec.trials}
    assert order == {t.cell: t.run_order for t in expand.smoke(validate.load_spec(tmp_path / "s.yaml")).trials}
    standard = [f"D1={a}|D9={b}" for a in ("shifted", "aligned") for b in ("hidden", "markov")]
    assert sorted(order, key=order.get) != standard
    # the driver creates each child run when Tune starts its trial, so creation order is
    # start order: Tune queues trials in run order, and with 2 slots the two queued
    # together may start a moment apart in either order
    started = [r.data.tags["cell"] for r in sorted(kids, key=lambda r: r.info.start_time)]
    assert all(abs(started.index(cell) - pos) < 2 for cell, pos in order.items()), (started, order)
    for r in kids:
        t = r.data.tags
        assert r.info.status == "FINISHED"
        assert t["mlflow.parentRunId"] == parents[0].info.run_id
        assert t["sweep"] == "smoke-smoke" and t["replicate"] == "0" and t["cell"].startswith("D1=")
        assert t["factor.D1"] in ("shifted", "aligned") and t["factor.D9"] in ("hidden", "markov")
        assert f"D1={t['factor.D1']}|D9={t['factor.D9']}" == t["cell"]
        assert len(t["target_hash"]) == 16 and len(t["data_sha256"]) == 64 and t["git_commit"] and t["seed"]
        p = r.data.params
        assert p["window"] == t["factor.D1"] and p["confidence_input"] == {"hidden": "hidden",
                                                                          "markov": "hidden+markov"}[t["factor.D9"]]
        assert p["seed"] == t["seed"] and p["target_path"].endswith(t["target_hash"] + ".pt")
        assert "tf/tau" in r.data.metrics and "spec/tau" in r.data.metrics and "tf/accept:1" in r.data.metrics
        assert len(c.get_metric_history(r.info.run_id, "tf/tau")) >= 2  # metrics carry their steps
        arts = {a.path for a in c.list_artifacts(r.info.run_id)}
        assert {"config.json", "final_metrics.json", "plots", "items.json"} <= arts
        # the evaluation's items are that one artifact, not hundreds of jack/ and split/ metrics
        assert not any(k.startswith(("jack/", "split/")) for k in r.data.metrics)
        items = run_items(c, r)
        assert items["split/prompts"] == float(p["spec_prompts"]) and "jack/spec/tau@g1" in items
    # one shared target, trained once, and reused by a later sweep with the same hash
    targets = list((tmp_path / "st" / "targets").glob("*.pt"))
    assert len(targets) == 1
    mtime = targets[0].stat().st_mtime_ns
    spec2 = expand.smoke(validate.load_spec(write_spec(tmp_path / "s2.yaml", corpus_dir, "smoke2",
                                                  {"D1": D1_D9["D1"]})))
    runner.run(spec2, tracking_uri=uri, storage=str(tmp_path / "st"), verbose=0)
    assert targets[0].stat().st_mtime_ns == mtime


def test_interrupted_driver_resumes_without_rerunning(tmp_path):
    """SIGTERM to the driver's whole process group (`setsid`, then `kill -TERM -- -PGID`, as
    timeout, scancel and service managers send it), which stops the local Ray's GCS too: it
    once hung 60 s on the dead GCS, exited 1 with no resume line, and left runs RUNNING and 7
    Ray processes alive. (SIGTERM to the driver alone, Ray left running, is
    tests/trials/test_augment.py's interrupted augment; SIGKILL, then `status` and `resume`, is
    tests/trials/test_postgres.py's, and `status` closing a SIGKILLed driver's runs on SQLite is
    tests/test_reliability.py's.)"""
    import yaml

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    gate = tmp_path / "gate"  # the toy's gate: the first trial finishes, the second waits until gate/open exists
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(yaml.safe_dump({
        "workload": "tests.toy.workload:WORKLOAD", "name": "interrupt", "max_concurrent": 1,
        "base": {"steps": 20, "eval_interval": 10, "hold": str(gate)},
        "factors": {"norm": {"none": {"norm": "none"}, "layer": {"norm": "layer"}},
                    "smooth": {"off": {"label_smoothing": 0.0}, "on": {"label_smoothing": 0.1}}}}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "trials.cli", "run", str(spec_path), "--tracking-uri", uri,
           "--storage", str(tmp_path / "st")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    finished_before = {}
    while proc.poll() is None:  # on states alone: the second trial holds until the gate opens
        time.sleep(1)
        try:
            _, _, kids = children(uri, "interrupt")
        except Exception:
            continue
        done = [r for r in kids if r.info.status == "FINISHED"]
        if done and any(r.info.status == "RUNNING" for r in kids):
            finished_before = {r.data.tags["trial_key"]: r.info.end_time for r in done}
            break
    assert finished_before, f"the sweep ended before a finished and a running trial were seen: {proc.stderr.read()}"
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=600) == 143
    err = proc.stderr.read()  # it did not wait on the dead GCS (it once hung there 60 s, then exited 1)
    assert "trials resume interrupt --storage" in err and "Failed to connect to GCS" not in err, err[-2000:]
    time.sleep(1)
    left = [p for p in psutil.process_iter(["pid", "status", "cmdline"])
            if p.info["status"] != psutil.STATUS_ZOMBIE and _pgid(p.info["pid"]) == proc.pid]
    assert not left, [p.info["cmdline"] for p in left]  # every Ray process it started is gone
    _, parents, kids = children(uri, "interrupt")
    assert not any(r.info.status == "RUNNING" for r in kids)
    assert parents[0].info.status == "KILLED"
    (gate / "open").touch()  # the resumed trials go on
    r = subprocess.run([sys.executable, "-m", "trials.cli", "resume", "interrupt", "--storage", str(tmp_path / "st")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    _, parents, kids = children(uri, "interrupt")
    assert len(parents) == 1 and len(kids) == 4
    assert len({k.data.tags["trial_key"] for k in kids}) == 4
    assert all(k.info.status == "FINISHED" for k in kids)
    client = MlflowClient(uri)
    for k in kids:  # no metric point is logged twice
        for key in k.data.metrics:
            steps = [m.step for m in client.get_metric_history(k.info.run_id, key)]
            assert len(steps) == len(set(steps)), (k.data.tags["trial_key"], key, steps)
    for k in kids:  # a trial finished before the interruption was not run again
        key = k.data.tags["trial_key"]
        if key in finished_before:
            assert k.info.end_time == finished_before[key] and "resumed" not in k.data.tags
    assert "4 finished" in r.stdout
    s = subprocess.run([sys.executable, "-m", "trials.cli", "status", "interrupt", "--storage", str(tmp_path / "st")],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert s.returncode == 0 and s.stdout.count("finished") >= 4


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # gone meanwhile
        return None


def test_a_shared_target_says_where_its_training_is_while_it_trains(ray_local, tmp_path, corpus_dir, capsys,
                                                                    monkeypatch):
    """No silence between a shared target's start and end lines (a small one trained 217 s
    with none): its evaluations' steps, the time so far and the time left, every
    TARGET_PROGRESS_S seconds (0.1 here)."""
    import re

    from dspark.targets import address
    from tests.conftest import tiny

    monkeypatch.setattr(runner, "TARGET_PROGRESS_S", 0.1)
    cfg = tiny(data=(str(corpus_dir),), target_steps=100, eval_interval=20)
    h = address(cfg)[0]
    from trials.workload import load_workload

    out = runner.ensure_targets(load_workload("dspark"), {h: cfg}, tmp_path, {"cpu": 1}, 2)
    lines = capsys.readouterr().out.splitlines()
    steps = [int(m.group(1)) for ln in lines for m in [re.match(rf"shared target {h}: step (\d+)/100, val/bpb "
                                                                r"\d\.\d{4}, \S+ elapsed, ~\S+ left$", ln)] if m]
    assert steps and steps == sorted(set(steps)) and all(s % 20 == 0 for s in steps), lines
    assert lines[0].startswith(f"shared target {h}: training 100 steps"), lines
    assert lines[-1].startswith(f"shared target {h}: trained"), lines
    assert Path(out[h]["path"]).is_file() and not list(tmp_path.rglob("*.progress.json*"))  # nothing left behind


def test_a_quiet_sweep_drops_tunes_slow_operation_warnings_and_keeps_the_others(caplog):
    """The demo's output held four "performance bottleneck" warnings from Tune's warn_if_slow
    (which logs them on ray.tune.utils.util), timing the driver's own callbacks: a quiet sweep
    drops them, and only them."""
    import logging

    from ray.tune.utils import util

    from trials.driver.progress import quiet_slow_warnings

    slow = util.warn_if_slow.DEFAULT_MESSAGE.format(name="process_trial_result", duration=0.812)
    log = logging.getLogger(util.__name__)
    assert util.logger is log
    quiet_slow_warnings()
    quiet_slow_warnings()  # once per process, however many sweeps it runs
    assert sum(type(f).__name__ == "_NotSlowWarnings" for f in log.filters) == 1
    with caplog.at_level(logging.WARNING, logger=log.name):
        util.logger.warning(slow)
        util.logger.warning("Processing trial results took 1.2 s, which may be a performance bottleneck. "
                            "Please consider reporting results less frequently to Ray Tune.")
        util.logger.warning("Install psutil to monitor system performance.")
    assert [r.getMessage() for r in caplog.records] == ["Install psutil to monitor system performance."]
