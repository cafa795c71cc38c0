"""A team's failures (issue 18): two drivers on one sweep, a store that lost the sweep's
records, a truncated checkpoint, a store or storage that cannot be used. Each case is one
the probe reproduced on main, run through the CLI as a user would."""

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from trials import lease as leasemod
from trials.lease import Lease, LeaseHeld, check_storage
from tests.conftest import fill_up

from .conftest import quick_spec, ray_sessions

ROOT = Path(__file__).resolve().parents[2]


def _env(home):
    return {"PYTHONPATH": str(ROOT), "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(home)}


def trials(*args, cwd, timeout=600, ray_tmp=None):
    """The CLI in a process of its own; `ray_tmp`: the folder its Ray (if it started one) would
    keep its sessions in, so that a test sees its own Ray alone, never another's on the machine."""
    env = {**_env(cwd), **({"RAY_TMPDIR": str(ray_tmp)} if ray_tmp else {})}
    r = subprocess.run([sys.executable, "-m", "trials.cli", *args], capture_output=True, text=True, cwd=cwd,
                       env=env, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def own_ray_tmp():
    """A short folder for a command's Ray sessions (Ray's socket paths must stay short)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))


def ray_started(ray_tmp) -> bool:
    return any(Path(ray_tmp).glob("ray/session_*"))


def _spec(tmp_path, corpus_dir, name="team", draft_steps=6, replicates=1):
    return quick_spec(tmp_path, corpus_dir, name, draft_steps, replicates)


# ---------------------------------------------------------------- one driver per sweep

def test_a_lease_is_exclusive_reentrant_and_taken_over_from_a_dead_driver(tmp_path):
    held = Lease(tmp_path, "s", "trials run").acquire()
    other = subprocess.run([sys.executable, "-c", "from trials.lease import Lease; import sys\n"
                            "Lease(sys.argv[1], 's', 'trials resume').acquire()", str(tmp_path)],
                           capture_output=True, text=True, env=_env(tmp_path), cwd=ROOT)
    assert other.returncode == 1 and f"is driven by pid {os.getpid()}" in other.stderr
    inner = Lease(tmp_path, "s", "trials run").acquire()  # augment's looks: the same process again
    inner.release()
    assert (tmp_path / "driver.lease").exists()  # only the outer release ends the lease
    held.release()
    assert not (tmp_path / "driver.lease").exists()
    # a lease left by a driver that died (kill -9): its pid is gone, so it is taken over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "driver.lease").write_text(json.dumps({"host": os.uname().nodename, "pid": int(dead.stdout),
                                                       "started": 1.0, "command": "trials run"}))
    Lease(tmp_path, "s", "trials resume").acquire().release()
    # another host's lease is alive while its heartbeat is fresh, dead once it is stale
    (tmp_path / "driver.lease").write_text(json.dumps({"host": "elsewhere", "pid": 1, "command": "trials run"}))
    with pytest.raises(LeaseHeld, match="driven by pid 1 on elsewhere"):
        Lease(tmp_path, "s", "trials run").acquire()
    old = time.time() - leasemod.STALE_S - 5
    os.utime(tmp_path / "driver.lease", (old, old))
    Lease(tmp_path, "s", "trials run").acquire().release()


# ---------------------------------------------------------------- nothing fabricated, nothing lost

def _histories(uri: str, sweep: str) -> dict:
    """Per trial, every (step, value) of tf/tau and val/bpb, read by MLflow in a fresh process
    (MLflow keeps one engine per store URI in a process: after the file is deleted and made
    again, this process's engine would still read the deleted one)."""
    code = ("import json, sys; from mlflow.tracking import MlflowClient; from trials.store.keys import sweep_trials\n"
            f"c = MlflowClient({uri!r}); e = c.get_experiment_by_name({sweep!r})\n"
            "print(json.dumps({r.info.run_name: {k: sorted([m.step, m.value] for m in c.get_metric_history("
            "r.info.run_id, k)) for k in ('tf/tau', 'val/bpb')} for r in sweep_trials(c, e.experiment_id)}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_deleted_store_is_refused_by_resume_and_rebuilt_by_recover(tmp_path, corpus_dir):
    from analysis.sweep_reader import load_runs
    from analysis.report import build_report

    spec = _spec(tmp_path, corpus_dir, "lost", replicates=2)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["--storage", str(tmp_path / "st"), "--tracking-uri", uri]
    rc, _, err = trials("run", str(spec), *args, cwd=tmp_path)
    assert rc == 0, err[-2000:]
    before = load_runs("lost", uri)
    verdicts = build_report(before, None, responses=["tf/tau"]).decision.table()
    histories = _histories(uri, "lost")
    assert len(histories) == 4 and all(len(h["tf/tau"]) >= 2 for h in histories.values())
    (tmp_path / "m.db").unlink()  # the store is gone, the storage stays
    rc, _, err = trials("resume", "lost", *args, cwd=tmp_path)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    assert "has no record of 4 trial(s) that storage holds results for" in err and "trials recover lost" in err
    rc, out, err = trials("recover", "lost", *args, cwd=tmp_path)
    assert rc == 0 and "4 of 4 trials finished" in out, err[-2000:]
    after = load_runs("lost", uri)
    assert len(after.runs) == 4 and set(after.runs["run_name"]) == set(before.runs["run_name"])
    assert _histories(uri, "lost") == histories  # every point back at its step, none twice
    again = build_report(after, None, responses=["tf/tau"]).decision.table()
    assert again[["term", "verdict", "estimate"]].equals(verdicts[["term", "verdict", "estimate"]])
    rc, _, err = trials("resume", "lost", *args, cwd=tmp_path)  # nothing left to run, nothing duplicated
    assert rc == 0, err[-2000:]
    assert len(load_runs("lost", uri).runs) == 4


def test_the_tracker_never_marks_a_run_finished_without_its_final_metrics(tmp_path):
    """The real tracker on a real store; only Tune's trial object is stood in for."""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from trials.validate import parse
    from trials.tracking import SweepTracker

    spec = parse({"name": "t", "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    tracker = SweepTracker(uri, spec, {})
    status = {}
    for i, (t, last) in enumerate(zip(spec.trials, ({"tf/tau": 2.0, "step": 10},  # metrics, no last word
                                                    {"tf/tau": 2.0, "step": 10, "trial/done": 1.0}))):
        trial = SimpleNamespace(trial_id=f"t{i}", config=spec.tune_params(t), last_result=last, checkpoint=None)
        tracker.on_trial_start(0, [], trial)
        tracker.on_trial_result(0, [], trial, last)
        tracker.on_trial_complete(0, [], trial)
    client = MlflowClient(uri)
    for run in tracker.ledger.child_runs().values():
        status[run.data.tags["cell"]] = (run.info.status, run.data.tags.get("error", ""))
    first, second = (t.cell for t in spec.trials)
    assert status[first] == ("FAILED", "the trial ended without reporting its final metrics")
    assert status[second][0] == "FINISHED"
    assert client.get_experiment_by_name("t") is not None


class LossyProxy:
    """An HTTP proxy in front of a tracking server that forwards the first `log-batch` POST
    carrying metrics, lets the server commit it, then hangs up without its answer, and hangs
    up on the next `down` requests unforwarded: a server that dies mid-request after its
    database committed, and is gone for a while."""

    def __init__(self, upstream_port: int, down: int):
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self
        self.dropped = self.down = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.down:
                    proxy.down -= 1
                    self.close_connection = True
                    return
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                conn.request(self.command, self.path, body, {k: v for k, v in self.headers.items()
                                                             if k.lower() not in ("host", "connection")})
                answer = conn.getresponse()
                data = answer.read()
                if self.path.endswith("/runs/log-batch") and b'"metrics"' in body and not proxy.dropped:
                    proxy.dropped, proxy.down = 1, down
                    self.close_connection = True  # committed upstream; the client hears nothing
                    return
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


def test_a_write_whose_answer_was_lost_lands_once(tmp_path):
    """The server commits a report's points and its answer is lost: the tracker's retry reads
    what landed and writes nothing twice. (MLflow's own resend of the same POST is harmless,
    the server drops a point it holds with the same timestamp; the tracker's retry of the
    report, made after MLflow gave up, was not: new timestamps, every point twice.)"""
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from trials.tracking import SweepTracker
    from trials.validate import parse

    from .test_postgres import Server

    server = Server(f"sqlite:///{tmp_path / 'm.db'}", tmp_path / "a", tmp_path)  # `mlflow server`, here on SQLite
    server.start()
    try:
        proxy = LossyProxy(server.port, down=4)  # more than MLflow's own 3 retries
        spec = parse({"name": "lossy", "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
        tracker = SweepTracker(proxy.url, spec, {}, retry_s=60)
        t = spec.trials[0]
        trial = SimpleNamespace(trial_id="t0", config=spec.tune_params(t), last_result=None, checkpoint=None)
        tracker.on_trial_start(0, [], trial)
        for step in (3, 6):
            tracker.on_trial_result(0, [], trial, {"step": step, "tf/tau": 2.0 + step, "train/loss": 1.0 / step})
        assert proxy.dropped == 1  # the first report's answer was lost
        client = MlflowClient(server.url)
        run_id = next(iter(tracker.ledger.child_runs().values())).info.run_id
        for metric in ("tf/tau", "train/loss"):
            history = client.get_metric_history(run_id, metric)
            assert sorted(m.step for m in history) == [3, 6], (metric, [(m.step, m.value) for m in history])
    finally:
        server.stop()


# ---------------------------------------------------------------- checkpoints

def test_resume_falls_back_past_a_truncated_checkpoint(tmp_path):
    from trials.layout import key_hash
    from trials.layout import latest_checkpoints
    from trials.workload import load_workload
    from trials.validate import parse

    spec = parse({"name": "c", "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    t = spec.trials[0]
    trial_dir = tmp_path / f"x_00000_{key_hash(t.key)}"
    for i in range(2):
        d = trial_dir / f"checkpoint_00000{i}"
        d.mkdir(parents=True)
        torch.save({"step": i, "pad": torch.zeros(2000)}, d / "state.pt")
        import hashlib

        (d / "state.sha256").write_text(hashlib.sha256((d / "state.pt").read_bytes()).hexdigest())
        time.sleep(0.01)
    newest = trial_dir / "checkpoint_000001" / "state.pt"
    newest.write_bytes(newest.read_bytes()[:1000])  # a copy cut short by a kill or a full disk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = latest_checkpoints(tmp_path, [t], load_workload())
    assert found == {t.key: str(trial_dir / "checkpoint_000000")}
    assert any("checkpoint_000001" in str(w.message) and "not intact" in str(w.message) for w in caught)


# ---------------------------------------------------------------- the store and storage, checked first

def test_an_unreachable_store_or_unusable_storage_is_refused_before_ray_starts(tmp_path, corpus_dir):
    spec = _spec(tmp_path, corpus_dir, "early")
    for cmd, words in (
            (["run", str(spec), "--tracking-uri", "http://127.0.0.1:9", "--storage", str(tmp_path / "st")],
             "tracking-uri: http://127.0.0.1:9: connection refused (is the server running?)"),
            (["run", str(spec), "--tracking-uri", "http://nohost.invalid:5000", "--storage", str(tmp_path / "st")],
             "tracking-uri: http://nohost.invalid:5000"),
            (["run", str(spec), "--storage", str(spec)], f"storage: {spec} is not a folder")):
        t0, ray_tmp = time.time(), own_ray_tmp()
        rc, out, err = trials(*cmd, cwd=tmp_path, ray_tmp=ray_tmp)
        assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
        assert words in err and not ray_started(ray_tmp)  # no Ray was started
        assert time.time() - t0 < 300  # no store retries: MLflow's defaults took 8 min 20 s here
    assert not (tmp_path / "st").exists() and not (tmp_path / "ray_results").exists()
    with pytest.raises(ValueError, match="MB free; a checkpoint of this sweep needs about"):
        check_storage(tmp_path, need_bytes=1 << 60)


# ---------------------------------------------------------------- a store that is briefly unwritable

def test_a_second_driver_is_refused_and_a_store_locked_for_25_s_loses_nothing(tmp_path, corpus_dir):
    """While a sweep runs, a second `run` and a `resume` of it are refused; then another
    process holds a write transaction on the SQLite store while trials report: the sweep
    once crashed after 20 s with 19 'database is locked' tracebacks."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    spec = _spec(tmp_path, corpus_dir, "locked", draft_steps=60)
    db = tmp_path / "m.db"
    args = ["--storage", str(tmp_path / "st"), "--tracking-uri", f"sqlite:///{db}"]
    driver = subprocess.Popen([sys.executable, "-m", "trials.cli", "run", str(spec), *args], cwd=tmp_path,
                              env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while True:  # wait until a trial is running and reporting
            assert time.time() < deadline and driver.poll() is None, driver.communicate()[1][-2000:]
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=30) as c:
                        if c.execute("select count(*) from runs where status = 'RUNNING' and name != "
                                     "'sweep locked'").fetchone()[0]:
                            break
                except sqlite3.OperationalError as e:  # the file is there before MLflow has made its tables
                    if "no such table" not in str(e):
                        raise
            time.sleep(0.5)
        # a second driver of the running sweep is refused, naming the first (it once trained
        # 4 trials 8 times and duplicated 182 points)
        for cmd in (["run", str(spec), *args], ["resume", "locked", *args]):
            rc, _, err = trials(*cmd, cwd=tmp_path)
            assert rc == 2 and "Traceback" not in err, err[-2000:]
            assert f"sweep 'locked' is driven by pid {driver.pid}" in err and len(err.strip().splitlines()) == 1
        lock = sqlite3.connect(db, timeout=30, isolation_level=None)
        lock.execute("BEGIN EXCLUSIVE")  # nobody else may read or write the store now
        time.sleep(25)
        lock.execute("ROLLBACK")
        lock.close()
        out, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    assert not (tmp_path / "st" / "locked" / "driver.lease").exists()  # released at the end
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("locked")
    kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''")
    assert len(kids) == 2 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "tf/tau")]
        assert len(steps) == len(set(steps)) and max(steps) >= 60


def test_a_local_sweep_starts_its_own_ray_beside_one_that_ray_start_left(tmp_path, corpus_dir):
    """`ray start` on the machine writes /tmp/ray/ray_current_cluster; a local sweep once
    joined that Ray (anyone's), and died with it."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
                             "--include-dashboard=false", "--node-ip-address=127.0.0.1"],
                            env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while not Path("/tmp/ray/ray_current_cluster").exists() or \
                str(port) not in Path("/tmp/ray/ray_current_cluster").read_text():
            assert time.time() < deadline and head.poll() is None, "ray start did not come up"
            time.sleep(0.5)
        spec = _spec(tmp_path, corpus_dir, "own")
        sessions = ray_sessions()  # the head's among them
        rc, out, err = trials("run", str(spec), "--storage", str(tmp_path / "st"),
                              "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path)
        assert rc == 0, err[-2000:]
        # a Ray of its own, not the head's: a session that was not there before (another user's
        # Ray starting meanwhile may add more: the count is machine-wide) and no word of the head's port
        assert len(ray_sessions() - sessions) >= 1
        assert f":{port}" not in err + out
    finally:
        head.terminate()
        head.wait(timeout=60)
        marker = Path("/tmp/ray/ray_current_cluster")  # `ray start` leaves it naming its head: not ours to keep
        if marker.exists() and f":{port}" in marker.read_text():
            marker.unlink()


# ---------------------------------------------------------------- storage on a small or read-only mount

def test_a_read_only_mount_is_refused_before_ray_starts(tmp_path, corpus_dir, mount):
    spec = _spec(tmp_path, corpus_dir, "ro")
    ro = mount(4, read_only=True)
    ray_tmp = own_ray_tmp()
    rc, out, err = trials("run", str(spec), "--storage", str(ro), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}",
                          cwd=tmp_path, ray_tmp=ray_tmp)
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-2000:]
    assert f"storage: cannot write in {ro} (Read-only file system)" in err and not ray_started(ray_tmp)


def test_a_disk_that_fills_mid_sweep_stops_cleanly_and_resumes_once_there_is_room(tmp_path, corpus_dir, mount):
    """Storage with room for the first checkpoints only (the tiny preset's are about 11 MB
    each): it once failed 4 of 4 trials with ENOSPC and ended in an EOFError traceback."""
    from mlflow.tracking import MlflowClient

    spec = _spec(tmp_path, corpus_dir, "full", draft_steps=30, replicates=2)
    small = mount(16)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["--storage", str(small), "--tracking-uri", uri]
    rc, out, err = trials("run", str(spec), *args, cwd=tmp_path)
    assert rc == 3, err[-3000:]
    tail = err.strip().splitlines()[-3:]
    assert tail[0] == f"trials: error: full: stopped, storage {small} is full: a trial could not write its " \
                      "checkpoint (No space left on device)", err[-3000:]
    assert tail[-1].strip().startswith("trials resume full") and "trials/runner.py" not in err
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("full")
    runs = client.search_runs([exp.experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert not [r for r in runs if r.info.status == "FAILED"]  # want of room is no trial's fault
    subprocess.run(["mount", "-o", "remount,size=200m", str(small)], check=True)  # room again
    rc, out, err = trials("resume", "full", *args, cwd=tmp_path)
    assert rc == 0, err[-3000:]
    kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''")
    assert len(kids) == 4 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:  # each point once
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "tf/tau")]
        assert len(steps) == len(set(steps)) and max(steps) == 30


def test_a_store_whose_disk_fills_mid_sweep_stops_at_the_first_failed_write_in_one_line(tmp_path, corpus_dir, mount):
    """The SQLite store on a mount that fills once the first trial has logged: it once took
    248 s (about 8 retry windows) and printed 481 lines blaming "Query-invoked autoflush"."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    spec = _spec(tmp_path, corpus_dir, "storefull", draft_steps=30, replicates=2)
    small = mount(8)
    db = small / "m.db"
    uri = f"sqlite:///{db}"
    MlflowClient(uri).search_experiments()  # MLflow's tables, made while there is room
    args = ["run", str(spec), "--storage", str(tmp_path / "st"), "--tracking-uri", uri, "--store-retry", "300"]
    driver = subprocess.Popen([sys.executable, "-m", "trials.cli", *args], cwd=tmp_path, env=_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:  # the first trial's first points, then fill
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
                if con.execute("SELECT count(*) FROM metrics").fetchone()[0] > 0:
                    break
            time.sleep(0.5)
        fill_up(small)
        filled = time.monotonic()
        out, err = driver.communicate(timeout=280)
    finally:
        driver.kill()
    stopped_s = time.monotonic() - filled
    assert driver.returncode == 3, err[-3000:]
    assert stopped_s < 120, stopped_s  # one failed write, not retry windows of 300 s
    lines = err.strip().splitlines()
    assert "Traceback" not in err and "autoflush" not in err, err[-3000:]
    stop = [ln for ln in lines if ln.startswith("trials: error: storefull: stopped")]
    assert len(stop) == 1 and f"the store {uri} failed" in stop[0] and "its disk is full" in stop[0], err[-3000:]
    assert lines[-1].strip().startswith("trials resume storefull"), err[-3000:]
    assert "MLflow" not in "".join(ln for ln in lines if "ERROR" in ln), err[-3000:]  # MLflow's own logged errors
    assert len(lines) < 12, err[-3000:]
    # room again: resume closes what the full disk left open and finishes every trial
    (small / "filler").unlink()
    rc, out, err = trials(*(["resume", "storefull"] + args[2:]), cwd=tmp_path)
    assert rc == 0, err[-3000:]
    client = MlflowClient(uri)
    kids = client.search_runs([client.get_experiment_by_name("storefull").experiment_id], "tags.trial_key != ''")
    assert len(kids) == 4 and all(r.info.status == "FINISHED" for r in kids)
    # the store is lost, and `recover` rebuilds it into a new one on a disk that fills on the
    # way: it once printed 85 lines of MLflow's tracebacks and SQL. One line, naming the full
    # disk; with room again, a second recover finishes every run.
    db.unlink()
    subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                    f"MlflowClient({uri!r}).search_experiments()"], check=True, capture_output=True)  # a new store
    fill_up(small, leave=96 * 1024)
    recover = ["recover", "storefull", "--storage", str(tmp_path / "st"), "--tracking-uri", uri]
    rc, out, err = trials(*recover, cwd=tmp_path)
    lines = err.strip().splitlines()
    assert rc == 3 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("trials: error: ") and "disk is full" in lines[0] and str(small) in lines[0], lines
    (small / "filler").unlink()
    rc, out, err = trials(*recover, cwd=tmp_path)
    assert rc == 0 and "4 of 4 trials finished" in out, err[-3000:]
    client = MlflowClient(uri)
    kids = client.search_runs([client.get_experiment_by_name("storefull").experiment_id], "tags.trial_key != ''")
    assert len(kids) == 4 and all(r.info.status == "FINISHED" for r in kids), [r.info.status for r in kids]


# ---------------------------------------------------------------- reading commands against a failing store

def _saved_sweep(root: Path, name: str, uri: str) -> None:
    """A sweep as `trials run` saves it in storage (spec and settings), with no runs."""
    import yaml

    from trials.saved import save_sweep_files
    from trials.validate import load_spec

    (root / name).mkdir(parents=True)
    spec_file = root / f"{name}.yaml"
    spec_file.write_text(yaml.safe_dump({"name": name, "base": {"preset": "tiny"}, "replicates": 1, "factors": {
        "D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}}}))
    save_sweep_files(root / name, load_spec(spec_file), uri, None)


def test_list_reads_states_from_storage_so_a_sweep_whose_server_is_down_is_listed_too(tmp_path):
    import socket

    from mlflow.tracking import MlflowClient

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    store = f"sqlite:///{tmp_path / 'm.db'}"
    MlflowClient(store).search_experiments()  # an MLflow store with no sweep in it yet
    _saved_sweep(tmp_path / "st", "here", store)
    _saved_sweep(tmp_path / "st", "away", dead)
    rc, out, err = trials("list", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    assert rc == 0, err[-2000:]
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert "2 pending" in rows["here"]
    # the trials' states are Tune storage's: no server is asked, so a dead one neither stalls nor hides the row
    assert "2 pending" in rows["away"] and dead in rows["away"] and "error" not in out


def test_a_reader_that_stops_reading_is_not_blamed_on_the_store(tmp_path):
    """`trials list | head`: the pipe closes before the table is written; the command ends
    quietly instead of blaming the store (BrokenPipeError is a ConnectionError)."""
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'm.db'}"
    MlflowClient(store).search_experiments()
    p = subprocess.Popen([sys.executable, "-m", "trials.cli", "list", "--tracking-uri", store],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, env=_env(tmp_path))
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and err == "", err  # was exit 3: "tracking-uri: ...: BrokenPipeError"


def test_drivers_that_open_a_new_sqlite_store_together_all_succeed(tmp_path):
    """MLflow creates a SQLite store's tables on first use; three processes doing it at once
    failed (alembic: 'Online migration expected to match one row', 'database is locked'),
    as two sweeps submitted together on a new store did in CI. tracking_client serialises
    the first use across processes."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    code = f"import sys; from trials.store.client import tracking_client; tracking_client({uri!r}).create_experiment(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, f"sweep{i}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env=_env(tmp_path)) for i in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    from trials.store.reader import reading_client

    names = {e.name for e in reading_client(uri).search_experiments()}
    assert {"sweep0", "sweep1", "sweep2"} <= names


# ---------------------------------------------------------------- storage files are input too (issue 29)

def test_bad_saved_sweep_files_are_named_in_one_line_and_list_shows_the_others(tmp_path, capsys):
    """`[1, 2]` as sweep.json once crashed `trials list` for every sweep and `trials status`
    (AttributeError); an empty one said "Expecting value: line 1 column 1" naming no file."""
    from trials.store.client import tracking_client
    from trials.cli import main

    store = f"sqlite:///{tmp_path / 'm.db'}"
    tracking_client(store).search_experiments()  # an MLflow store with no sweep in it yet
    root = tmp_path / "st"
    for name in ("good", "pair", "empty", "folder", "nouri", "badspec"):
        _saved_sweep(root, name, store)
    (root / "pair" / "sweep.json").write_text("[1, 2]")
    (root / "empty" / "sweep.json").write_text("")
    (root / "folder" / "sweep.json").unlink()
    (root / "folder" / "sweep.json").mkdir()
    (root / "nouri" / "sweep.json").write_text('{"max_concurrent": 2}')
    (root / "badspec" / "spec.yaml").write_text("name: [\n")
    (root / "solo").mkdir()  # first, the good sweep alone: its one store is said once, under the table
    (root / "good").rename(root / "solo" / "good")
    assert main(["list", "--storage", str(root / "solo")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["sweep", "trials", "state", "MLflow"] and lines[-1] == f"(every sweep's MLflow store: {store})"
    (root / "solo" / "good").rename(root / "good")
    assert main(["list", "--storage", str(root)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "2 pending" in rows["good"] and len(rows) == 6
    said = {"pair": "pair/sweep.json is not a sweep's settings (a JSON object), got '[1, 2]'",
            "empty": "empty/sweep.json is empty",
            "folder": "folder/sweep.json cannot be read (Is a directory)",
            "nouri": "nouri/sweep.json: tracking_uri: the sweep's MLflow store, got 'None'",
            "badspec": "badspec/spec.yaml is not valid YAML"}
    for name, words in said.items():
        assert f"unreadable: {words}" in rows[name], rows[name]
        assert main(["status", name, "--storage", str(root)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"trials: error: status: {root}/{words}"), err


def test_a_damaged_lease_is_taken_over_at_once_and_a_folder_is_refused(tmp_path, capsys):
    """`{"pid": Infinity}` once raised OverflowError, and garbage held the sweep for 90 s as
    "driven by pid ? on ?": no driver writes either (leases are written whole)."""
    from trials.cli import main

    path = tmp_path / "driver.lease"
    for content in ('{"pid": Infinity, "host": "h"}', "garbage", "", '{"host": "h", "pid": "?"}', "[1]"):
        path.write_text(content)
        old = time.time() - 5
        os.utime(path, (old, old))
        t0 = time.time()
        lease = Lease(tmp_path, "s", "trials run s").acquire()
        assert time.time() - t0 < 2 and json.loads(path.read_text())["pid"] == os.getpid()
        lease.release()
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"its lease {path} is no driver's record" in err[0] and "taken over as stale" in err[0]
    store = f"sqlite:///{tmp_path / 'm.db'}"
    _saved_sweep(tmp_path / "st", "s", store)
    (tmp_path / "st" / "s" / "driver.lease").mkdir()  # once an IsADirectoryError traceback
    assert main(["recover", "s", "--storage", str(tmp_path / "st")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trials: error: sweep 's': its lease {tmp_path / 'st' / 's' / 'driver.lease'} is a folder, not a lease "
        "file; remove it (no driver makes one)"]


def test_storage_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """spec.yaml and sweep.json go through a temporary file and os.replace: a failure between
    the write and the replace leaves the older files whole and no temporary behind. A lease
    gets its name only once its content is whole (os.link of a written file)."""
    from trials.saved import save_sweep_files
    from trials.validate import load_spec

    _saved_sweep(tmp_path / "st", "s", "sqlite:///old.db")
    exp_dir = tmp_path / "st" / "s"
    before = {p.name: p.read_bytes() for p in exp_dir.iterdir()}

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_sweep_files(exp_dir, load_spec(tmp_path / "st" / "s.yaml"), "sqlite:///new.db", 3)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in exp_dir.iterdir()} == before
    named = []
    real_link = os.link

    def link(src, dst):  # what the lease holds at the instant it gets its name
        named.append(json.loads(Path(src).read_text()))
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    lease = Lease(exp_dir, "s", "trials run s").acquire()
    assert named[0]["pid"] == os.getpid() and named[0]["command"] == "trials run s"
    assert json.loads((exp_dir / "driver.lease").read_text()) == named[0]
    lease.release()
    assert {p.name: p.read_bytes() for p in exp_dir.iterdir()} == before
