"""The README's cluster path, for real: a head started by `ray start --head` (token
authentication on, the dashboard and its job server on 127.0.0.1, no CPUs of its own, as in
cluster.yaml) and a second `ray start --address` worker node with its own resources. Two
sweeps submitted at once with `ray job submit --working-dir . -- trials run ... --address
auto` share the cluster: both finish with separate parents, their trials run on the worker
and write their checkpoints to the shared storage."""

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests.trials.conftest import quick_spec
from tests.trials.test_runner import children

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray(*args, env, block=True):
    return subprocess.Popen([str(BIN / "ray"), "start", *(["--block"] if block else []), *args,
                             "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _stop(procs, temp_dirs):
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
    # whatever the nodes started and left behind (found by their own temp folders, never `ray stop`,
    # which would stop every Ray on the machine)
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if any(d in cmd for d in temp_dirs):
            try:
                proc.kill()
            except psutil.Error:
                pass
    for d in temp_dirs:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    """(the job server's address, the environment its users share, the worker's node id)"""
    gcs, dash = _port(), _port()
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(16), "OMP_NUM_THREADS": "1"}
    # short folders of their own: Ray's socket paths must stay under 108 bytes, and the two
    # nodes on one machine must not share one (a node's runtime-env agent would delete the
    # other node's copy of the job's working dir)
    head_tmp, worker_tmp = tempfile.mkdtemp(prefix="rh", dir="/tmp"), tempfile.mkdtemp(prefix="rw", dir="/tmp")
    procs = [_ray("--head", f"--port={gcs}", "--num-cpus=0", "--dashboard-host=127.0.0.1",
                  f"--dashboard-port={dash}", f"--ray-client-server-port={_port()}", f"--temp-dir={head_tmp}",
                  *_agent_ports(), env=env)]
    try:
        _wait_for(lambda: _listening(dash), procs[0], "the head's job server")
        procs.append(_ray(f"--address=127.0.0.1:{gcs}", "--num-cpus=2", '--resources={"worker_node": 1}',
                          f"--temp-dir={worker_tmp}", *_agent_ports(), env=env))
        _wait_for(lambda: _worker_node(gcs, env) is not None, procs[1], "the worker node")
        yield f"http://127.0.0.1:{dash}", env, _worker_node(gcs, env)
    finally:
        _stop(procs, [head_tmp, worker_tmp])


def _agent_ports() -> list[str]:
    """Free ports for a node's agents: Ray's fixed defaults (52365 for the dashboard agent)
    are taken by the other node on this machine, or by a Ray an earlier test left, and a
    node whose agent cannot bind takes no job ("No available agent to submit job")."""
    return [f"--dashboard-agent-listen-port={_port()}", f"--dashboard-agent-grpc-port={_port()}",
            f"--metrics-export-port={_port()}", f"--runtime-env-agent-port={_port()}"]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_for(ready, proc, what, timeout=180):
    deadline = time.time() + timeout
    while not ready():
        if proc.poll() is not None or time.time() > deadline:
            out = proc.stdout.read() if proc.poll() is not None else ""
            pytest.fail(f"{what} did not come up: {out[-2000:]}")
        time.sleep(1)


def _worker_node(gcs: int, env) -> str | None:
    """The node id of the node holding the `worker_node` resource, once it has joined."""
    code = ("import ray, json; ray.init(address='127.0.0.1:%d', log_to_driver=False)\n"
            "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive'] and "
            "'worker_node' in n['Resources']]))" % gcs)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    ids = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else "[]"
    found = __import__("json").loads(ids)
    return found[0] if found else None


def test_two_sweeps_submitted_with_ray_job_submit_share_a_two_node_cluster(cluster, tmp_path, corpus_dir):
    job_server, env, worker = cluster
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = tmp_path / "shared"
    specs = [quick_spec(tmp_path, corpus_dir, name, draft_steps=9) for name in ("alpha", "beta")]
    def submit(s):
        return subprocess.Popen([str(BIN / "ray"), "job", "submit", "--address", job_server, "--working-dir",
                                 str(ROOT), "--", "trials", "run", str(s), "--address", "auto", "--tracking-uri", uri,
                                 "--storage", str(storage)],
                                env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    jobs = [submit(s) for s in specs]
    outs = [j.communicate(timeout=900)[0] for j in jobs]
    for i, (j, out) in enumerate(zip(jobs, outs)):
        deadline = time.time() + 180
        while time.time() < deadline:  # a loaded machine: the node's job agent may not have registered yet (Ray's
            if j.returncode == 0 or "No available agent to submit job" not in out:  # own hint: try again later)
                break
            time.sleep(10)
            j = jobs[i] = submit(specs[i])
            out = outs[i] = j.communicate(timeout=900)[0]
    for j, out in zip(jobs, outs):
        assert j.returncode == 0 and "succeeded" in out, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
    parents = set()
    for name in ("alpha", "beta"):
        _, sweep_parents, kids = children(uri, name)
        assert len(sweep_parents) == 1 and sweep_parents[0].info.status == "FINISHED"
        parents.add(sweep_parents[0].info.run_id)
        assert len(kids) == 2 and all(k.info.status == "FINISHED" for k in kids)
        # the worker node ran the trials (the head has no CPUs), and their checkpoints are in
        # the shared storage
        assert all(k.data.tags.get("ray_nodes") == worker for k in kids), [k.data.tags for k in kids]
        client = MlflowClient(uri)
        assert all("tf/tau" in client.get_run(k.info.run_id).data.metrics for k in kids)
        saved = list((storage / name).rglob("state.pt"))
        assert len({p.parts[len((storage / name).parts)] for p in saved}) == 2, saved
    assert len(parents) == 2
    # both sweeps reuse one shared target, written whole however the two drivers raced
    assert len(list((storage / "targets").rglob("*.pt"))) == 1
    assert not list((storage / "targets").rglob("*.tmp"))


@pytest.mark.parametrize("address, says", [
    ("ray://10.0.0.5:10001", "Ray Client (ray://) is not supported"),
    ("http://127.0.0.1:8265", "is a dashboard address"),
    ("10.0.0.5", "expected auto or HOST:PORT"),
    ("10.0.0.5:99999", "expected auto or HOST:PORT"),
])
def test_address_forms_users_type_are_refused_in_one_line(tmp_path, corpus_dir, address, says):
    spec = quick_spec(tmp_path, corpus_dir, "addr")
    r = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(spec), "--address", address,
                        "--storage", str(tmp_path / "st"), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    last = r.stderr.strip().splitlines()[-1]  # argparse's usage, then the one error line
    assert r.returncode == 2 and last.startswith("trials run: error: argument --address") and says in last, r.stderr
    assert not (tmp_path / "st").exists() and not (tmp_path / "m.db").exists()


def test_an_address_where_nothing_listens_is_refused_before_any_work(tmp_path, corpus_dir):
    spec = quick_spec(tmp_path, corpus_dir, "silent")
    r = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(spec), "--address", f"127.0.0.1:{_port()}",
                        "--storage", str(tmp_path / "st"), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=300)
    assert r.returncode == 2 and "nothing answers there" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "st" / "silent").exists()  # refused in seconds, not after Ray's minutes of retries
