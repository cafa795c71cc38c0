"""Reliability: bad input is refused with one line and exit 2 before any work starts, and
reading commands create nothing. Each case is one that a hostile probe found (issue 9)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from dspark.config import from_dict
from trials.spec import SpecError
from trials.validate import parse

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--preset", "tiny", "--set", "target_steps=4", "--set", "draft_steps=4", "--set", "eval_interval=2",
        "--set", "spec_prompts=0", "--set", "max_corpus_bytes=200000", "--set", "seq_len=64", "--set", "batch_size=2"]


def run(module, *args, cwd):
    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)}, timeout=300)
    return r.returncode, r.stdout, r.stderr


def one_line_error(rc, err, *words):
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("field,value", [("decay_gamma", "inf"), ("lr", "inf"), ("target_lr", "nan"),
                                         ("aux_weight", "-inf"), ("grad_clip", "inf")])
def test_non_finite_numbers_are_refused(field, value, tmp_path):
    with pytest.raises(ValueError, match=f"{field}: must be a finite number"):
        from_dict({field: value})
    rc, _, err = run("dspark.cli", "train", *TINY, "--set", f"{field}={value}", cwd=tmp_path)
    one_line_error(rc, err, field, "finite")
    assert not (tmp_path / "runs").exists()


def test_a_billion_replicates_is_refused_at_once():
    raw = {"name": "big", "base": {"preset": "tiny"}, "replicates": 1_000_000_000,
           "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert e.value.problems == ["replicates: 2 cells x 1000000000 replicates = 2000000000 trials, more than "
                                "the 10000 a sweep may hold"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A real checkpoint of a tiny run, trained with decay_gamma 'block' and lr 3e-3."""
    out = tmp_path_factory.mktemp("ckpt")
    rc, _, err = run("dspark.cli", "train", *TINY, "--set", f"out_dir={out}/run", cwd=out)
    assert rc == 0, err
    return out / "run" / "checkpoint"


def test_bad_resume_paths_print_one_line(checkpoint, tmp_path):
    (tmp_path / "file").write_text("x")
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    blob = (checkpoint / "state.pt").read_bytes()
    (trunc / "state.pt").write_bytes(blob[: len(blob) // 2])
    rnd = tmp_path / "rnd"
    rnd.mkdir()
    (rnd / "state.pt").write_bytes(bytes(range(256)) * 40)
    for path, words in ((tmp_path / "missing", ("not a checkpoint directory",)),
                        (tmp_path / "file", ("not a checkpoint directory",)),
                        (trunc, ("not a dspark checkpoint",)), (rnd, ("not a dspark checkpoint",))):
        rc, _, err = run("dspark.cli", "train", *TINY, "--resume", str(path), cwd=tmp_path)
        one_line_error(rc, err, "resume:", *words)


@pytest.mark.parametrize("override,field", [("decay_gamma=4", "decay_gamma"), ("lr=1e-2", "lr"),
                                            ("window=shifted", "window")])
def test_resume_refuses_an_override_that_changes_what_trains(checkpoint, tmp_path, override, field):
    rc, _, err = run("dspark.cli", "train", *TINY, "--set", f"out_dir={tmp_path}/r", "--resume", str(checkpoint),
                     "--set", override, cwd=tmp_path)
    one_line_error(rc, err, "resume:", field, "would change what trains")
    assert not (tmp_path / "r" / "run.json").exists()


def test_resume_accepts_an_override_that_does_not_change_training(checkpoint, tmp_path):
    rc, out, err = run("dspark.cli", "train", *TINY, "--set", f"out_dir={tmp_path}/r", "--resume", str(checkpoint),
                       "--set", "eval_batches=2", cwd=tmp_path)
    assert rc == 0, err


def test_a_non_target_file_as_target_path_prints_one_line(tmp_path):
    torch.save({"a": 1}, tmp_path / "dict.pt")
    for path in ("/bin/ls", str(tmp_path / "dict.pt"), str(tmp_path / "missing.pt")):
        rc, _, err = run("dspark.cli", "train", *TINY, "--set", f"target_path={path}", cwd=tmp_path)
        one_line_error(rc, err, "target_path:", path)


def test_analysis_refusals_print_one_line_and_create_nothing(tmp_path):
    rc, _, err = run("analysis.cli", "report", "demo", cwd=tmp_path)
    one_line_error(rc, err, "tracking-uri", "does not exist")
    rc, _, err = run("analysis.cli", "report", "demo", "--parquet", "nope.parquet", cwd=tmp_path)
    one_line_error(rc, err, "parquet: nope.parquet is not a file")
    rc, _, err = run("analysis.cli", "export", "demo", str(tmp_path / "no" / "x.parquet"), cwd=tmp_path)
    one_line_error(rc, err, "export: folder", "does not exist")
    # no empty mlflow.db, no report folder (HOME is here too: its dot folders are caches)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_trials_status_follows_the_name_rule_and_creates_nothing(tmp_path):
    rc, _, err = run("trials.cli", "status", "nosuch", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    one_line_error(rc, err, "status: no sweep 'nosuch'")
    rc, _, err = run("trials.cli", "status", "../other/sweep", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    one_line_error(rc, err, "status:", "not a sweep name")
    (tmp_path / "st" / "s").mkdir(parents=True)
    (tmp_path / "st" / "s" / "spec.yaml").write_text(yaml.safe_dump(
        {"name": "s", "base": {"preset": "tiny"}, "factors": {"D1": {"a": {"window": "shifted"},
                                                                     "b": {"window": "aligned"}}}}))
    (tmp_path / "st" / "s" / "sweep.json").write_text('{"tracking_uri": "sqlite:///gone.db"}')
    rc, _, err = run("trials.cli", "status", "s", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    one_line_error(rc, err, "tracking-uri", "does not exist")
    assert not (tmp_path / "gone.db").exists()


def test_sigterm_stops_a_background_driver_before_tune_starts(tmp_path, corpus_dir):
    """A shell starts background jobs with SIGINT ignored; SIGTERM during the shared
    target's training must still stop the driver, exit 143, leave the parent KILLED and
    say how to resume."""
    import signal
    import time


    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "bg", "base": {"preset": "tiny", "data": [str(corpus_dir)], "target_steps": 3000,
                               "eval_interval": 1000, "max_corpus_bytes": 300000},
        "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}}))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trials.cli", "run", str(spec), "--tracking-uri", uri, "--storage", str(tmp_path / "st")],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as a shell's `&` does
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "st" / "targets").is_dir():
        time.sleep(0.5)  # the shared target is training: Tune has not started
    assert (tmp_path / "st" / "targets").is_dir()
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert rc == 143, err[-2000:]
    assert "interrupted (SIGTERM)" in err and "trials resume bg --storage" in err
    assert not list((tmp_path / "st" / "targets").glob("*.pt"))  # no target half-written


def test_cpu_zero_is_refused_before_any_work():
    raw = {"name": "r", "base": {"preset": "tiny"}, "resources": {"cpu": 0, "gpu": 0},
           "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert e.value.problems == ["resources: cpu must be at least 1 (a trial trains on it), got 0"]


def test_a_gpu_request_on_a_machine_without_one_is_refused_at_once(tmp_path, corpus_dir):
    """It used to wait in ray.get for ever with no message."""
    import time

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "gpu", "base": {"preset": "tiny", "data": [str(corpus_dir)]}, "resources": {"cpu": 1, "gpu": 1},
        "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}}))
    t0 = time.time()
    rc, _, err = run("trials.cli", "run", str(spec), "--storage", str(tmp_path / "st"),
                     "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path)
    assert time.time() - t0 < 120
    one_line_error(rc, err, "trials: error: resources: a trial asks for gpu=1, which no node holds on this fixed Ray")
    assert not (tmp_path / "st" / "targets").exists() or not list((tmp_path / "st" / "targets").iterdir())


def test_an_autoscaling_wait_is_bounded_and_names_the_resource():
    import ray

    from trials.driver.cluster import check_resources

    spec = parse({"name": "w", "base": {"preset": "tiny"}, "resources": {"cpu": 64, "gpu": 0},
                  "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        with pytest.raises(ValueError, match=r"asks for cpu=64, which no node holds after waiting 0.2 s"):
            check_resources(spec, autoscaling=True, wait_s=0.2, poll_s=0.05)
        check_resources(parse({**{"name": "ok", "base": {"preset": "tiny"}},
                               "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}}),
                        autoscaling=False)  # one cpu fits
    finally:
        ray.shutdown()


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_resume_unpickles_nothing_from_storage(tmp_path, corpus_dir):
    """Anyone who can write the sweep's storage must not run code as the next user who
    resumes: crafted tuner.pkl, trainable.pkl and experiment-state files stay unread."""
    import pickle

    from mlflow.tracking import MlflowClient

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "evil", "base": {"preset": "tiny", "data": [str(corpus_dir)], "target_steps": 6, "draft_steps": 6,
                                 "eval_interval": 3, "eval_batches": 1, "spec_prompts": 0, "seq_len": 64,
                                 "max_corpus_bytes": 300000},
        "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}, "max_concurrent": 1}))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["--storage", str(tmp_path / "st"), "--tracking-uri", uri]
    rc, _, err = run("trials.cli", "run", str(spec), *args, cwd=tmp_path)
    assert rc == 0, err[-2000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("evil")
    kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''")
    victim = next(r for r in kids if r.data.tags["cell"] == "D1=a")
    client.set_terminated(victim.info.run_id, "KILLED")  # as after an interruption
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Evil(marker))
    exp_dir = tmp_path / "st" / "evil"
    for name in ("tuner.pkl", "trainable.pkl"):
        (exp_dir / name).write_bytes(payload)
    for state in exp_dir.glob("experiment_state*.json"):
        state.write_bytes(payload)
    for trial_dir in exp_dir.iterdir():
        if trial_dir.is_dir():
            (trial_dir / "params.pkl").write_bytes(payload)
    rc, out, err = run("trials.cli", "resume", "evil", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    assert rc == 0, err[-2000:]
    assert not marker.exists()
    kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''")
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    other = next(r for r in kids if r.data.tags["cell"] == "D1=b")
    assert "resumed" not in other.data.tags  # the finished trial did not run again
    again = client.get_run(victim.info.run_id)
    assert again.data.tags.get("resumed") == "1"
    for key in again.data.metrics:  # no metric holds a step twice
        steps = [m.step for m in client.get_metric_history(victim.info.run_id, key)]
        assert len(steps) == len(set(steps)), key


def test_status_closes_the_runs_of_a_driver_killed_with_sigkill(tmp_path):
    """After kill -9 of the driver its runs stayed RUNNING and `status` showed them as
    running for ever; now they end KILLED once the recorded driver is gone. `status` reads
    the sweep's storage (its trial folders and the driver's lease), and opens the store only
    to close a dead driver's runs."""
    import json
    import socket

    import psutil
    from mlflow.tracking import MlflowClient

    from trials import layout, saved
    from trials.lease import LEASE_FILE
    from trials.tracking import open_ledger

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = parse({"name": "k9", "base": {"preset": "tiny"},
                  "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    exp_dir = tmp_path / "st" / "k9"
    exp_dir.mkdir(parents=True)
    saved.save_sweep_files(exp_dir, spec, uri, None)
    ledger = open_ledger(uri, spec)
    ledger.claim()
    for i, t in enumerate(spec.trials):  # each trial started: its folder, one result, not done
        ledger.open_child(t, {})
        (exp_dir / layout.trial_dirname(f"k9_{i:05d}", t.key)).mkdir()
        (exp_dir / layout.trial_dirname(f"k9_{i:05d}", t.key) / layout.RESULT_FILE).write_text('{"step": 1}\n')
    me = psutil.Process()
    lease = {"host": socket.gethostname(), "pid": me.pid, "started": me.create_time(), "command": "trials run"}
    (exp_dir / LEASE_FILE).write_text(json.dumps(lease))
    rows = saved.status(spec, exp_dir, uri)  # the driver (this process) is alive: nothing is touched
    assert [r["state"] for r in rows] == ["running", "running"]
    dead = subprocess.Popen(["true"])
    dead.wait()
    (exp_dir / LEASE_FILE).write_text(json.dumps({**lease, "pid": dead.pid}))
    client = MlflowClient(uri)
    client.set_tag(ledger.parent_id, "driver_pid", str(dead.pid))
    assert client.get_run(ledger.parent_id).data.tags["driver_host"] == socket.gethostname()
    rows = saved.status(spec, exp_dir, uri)
    assert [r["state"] for r in rows] == ["killed", "killed"]
    assert client.get_run(ledger.parent_id).info.status == "KILLED"
    assert all(r.info.status == "KILLED" for r in client.search_runs([ledger.experiment_id]))


def test_status_shows_a_running_trials_latest_value_marked_and_never_nan(tmp_path, capsys):
    """A running trial showed "nan" (its result held a NaN) and another a blank: now a
    non-finite value is no value, a running one's latest is marked "~", and a line says so."""
    import json
    import socket

    import psutil

    from trials import layout, saved
    from trials.listing import show_status
    from trials.lease import LEASE_FILE

    spec = parse({"name": "mid", "base": {"preset": "tiny"}, "responses": {"tf/tau": {"better": "higher", "margin": 0.1}},
                  "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    exp_dir = tmp_path / "st" / "mid"
    exp_dir.mkdir(parents=True)
    saved.save_sweep_files(exp_dir, spec, uri, None)
    for i, (t, tau) in enumerate(zip(spec.trials, ("NaN", "2.5"))):
        d = exp_dir / layout.trial_dirname(f"mid_{i:05d}", t.key)
        d.mkdir()
        (d / layout.RESULT_FILE).write_text(f'{{"step": 1, "tf/tau": {tau}}}\n')
    me = psutil.Process()
    (exp_dir / LEASE_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": me.pid,
                                                  "started": me.create_time(), "command": "trials run"}))
    rows = saved.status(spec, exp_dir, uri)
    assert [(r["state"], r["tf/tau"]) for r in rows] == [("running", ""), ("running", "~2.5")]
    show_status(spec, uri, str(tmp_path / "st"))
    out = capsys.readouterr().out
    assert "nan" not in out.lower() and "(~: a running trial's latest evaluation so far" in out


def test_a_local_ray_listens_on_loopback_only():
    """A local sweep's Ray listened on all interfaces; the README promises localhost only."""
    import psutil
    import ray

    from trials.driver import cluster

    ray.shutdown()
    assert cluster.init_ray(None, num_cpus=1)
    try:
        @ray.remote
        def warm():  # start a worker, so that its port is counted too
            return 1

        ray.get(warm.remote())
        pids = {psutil.Process().pid} | {p.pid for p in psutil.Process().children(recursive=True)}
        listening = [c for c in psutil.net_connections(kind="inet")
                     if c.status == psutil.CONN_LISTEN and c.pid in pids]
        assert len(listening) >= 3  # GCS, raylet, driver (at least)
        exposed = [(c.pid, c.laddr) for c in listening if c.laddr.ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
        assert not exposed, exposed
    finally:
        ray.shutdown()
