"""A team's tracking server: `mlflow server` on 127.0.0.1, backed by PostgreSQL (an
unprivileged cluster this module starts in a temporary folder). A sweep runs against it
over HTTP; the server stops mid-sweep and never comes back (the driver stops within its
retry window, one line, exit 3); it comes back and `resume` finishes the sweep with every
metric point once; the link printed points at the server; `status` and `report` read it.
Another sweep lives through a server restart and a SIGKILL of its driver, then `status`,
`resume`, `recover` into a second database and a notebook run against the servers."""

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import quick_spec

ROOT = Path(__file__).resolve().parents[2]


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run it as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _env(home) -> dict:
    return {"PYTHONPATH": str(ROOT), "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(home)}


class Server:
    """`mlflow server` on a PostgreSQL store, restartable on the same port."""

    def __init__(self, db_uri: str, artifacts: Path, home: Path):
        self.db_uri, self.artifacts, self.home = db_uri, artifacts, home
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.db_uri,
             "--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1", "--port", str(self.port),
             "--workers", "1"],
            env=_env(self.home), stdout=subprocess.DEVNULL, stderr=open(self.home / "server.log", "ab"),
            start_new_session=True)
        deadline = time.time() + 180
        while True:
            try:
                if urllib.request.urlopen(f"{self.url}/health", timeout=2).status == 200:
                    return
            except OSError:
                pass
            assert time.time() < deadline and self.proc.poll() is None, \
                "mlflow server did not come up: " + (self.home / "server.log").read_text()[-2000:]
            time.sleep(1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # gone at once, as when its machine dies
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL is not installed here (.ci/run installs Debian's postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="dspark-pg-", dir="/tmp"))  # a folder the postgres user can reach
    data, port = folder / "data", _free_port()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    subprocess.run(_as_postgres([initdb, "-D", str(data), "-U", "mlflow", "-A", "trust", "--no-sync"]),
                   check=True, capture_output=True)
    subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
                                 f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start"]),
                   check=True, capture_output=True)
    try:
        subprocess.run([_bin("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "mlflow", "mlflow"],
                       check=True, capture_output=True)
        home = tmp_path_factory.mktemp("home")
        s = Server(f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow", home / "artifacts", home)
        s.pg_port = port
        s.start()
        yield s
        s.stop()
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def _cli(module, *args, cwd, timeout=600):
    r = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd,
                       env=_env(cwd), timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def _spec(tmp_path, corpus_dir, name, draft_steps, target):
    return quick_spec(tmp_path, corpus_dir, name, draft_steps, replicates=2, target=target)


def test_a_sweep_on_the_server_survives_its_loss_and_reads_back(server, tmp_path, corpus_dir, quick_target):
    from mlflow.tracking import MlflowClient

    spec = _spec(tmp_path, corpus_dir, "gone", 30, quick_target)
    args = ["--storage", str(tmp_path / "st"), "--tracking-uri", server.url]
    driver = subprocess.Popen([sys.executable, "-m", "trials.cli", "run", str(spec), *args, "--store-retry", "5"],
                              cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        client = MlflowClient(server.url)
        deadline = time.time() + 240
        while True:  # a trial is reporting: stop the server for good
            exp = client.get_experiment_by_name("gone")
            kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''") if exp else []
            if any("tf/tau" in r.data.metrics for r in kids):
                break
            assert time.time() < deadline and driver.poll() is None, driver.communicate()[1][-2000:]
            time.sleep(1)
        server.stop()
        t0 = time.time()
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    waited = time.time() - t0
    assert driver.returncode == 3, err[-3000:]
    assert "Traceback" not in err and f"the store {server.url} failed" in err and "trials resume gone" in err
    assert waited < 300  # MLflow's defaults blocked 12 min 24 s here
    server.start()  # it comes back: resume finishes the sweep and every point is there once
    rc, out, err = _cli("trials.cli", "resume", "gone", *args, cwd=tmp_path)
    assert rc == 0, err[-3000:]
    assert f"{server.url}/#/experiments/" in out and "mlflow ui" not in out  # the link is the server's
    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name("gone")
    kids = client.search_runs([exp.experiment_id], "tags.trial_key != ''")
    assert len(kids) == 4 and all(r.info.status == "FINISHED" for r in kids)
    for r in kids:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "tf/tau")]
        assert len(steps) == len(set(steps)) and max(steps) >= 30, steps
    rc, out, err = _cli("trials.cli", "status", "gone", "--storage", str(tmp_path / "st"), cwd=tmp_path)
    assert rc == 0 and out.count("finished") >= 4, err[-2000:]
    rc, out, err = _cli("analysis.cli", "report", "gone", "--tracking-uri", server.url, "--out", str(tmp_path / "rep"),
                        "--responses", "tf/tau", cwd=tmp_path)
    # --responses of one's own: a what-if, in its own folder
    assert rc == 0 and "\n  tf/tau: " in out and (tmp_path / "rep" / "gone" / "what-if" / "report.html").is_file(), err[-2000:]


def _tune_points(exp_dir: Path, metric: str) -> list[tuple[str, int, float]]:
    """(D1 level and replicate, step, value) of every point Tune's result files hold, each
    step once per trial (a trial resumed from a checkpoint reports its later steps again)."""
    import json

    seen = {}
    for f in exp_dir.rglob("result.json"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if metric in r and r[metric] is not None and r[metric] == r[metric]:
                seen[(f"{r['config']['D1']} r{r['config']['replicate']}", int(r["step"]))] = round(r[metric], 9)
    return sorted((k, step, v) for (k, step), v in seen.items())


def _store_points(client, experiment: str, metric: str) -> list[tuple[str, int, float]]:
    exp = client.get_experiment_by_name(experiment)
    out = []
    for r in client.search_runs([exp.experiment_id], "tags.trial_key != ''"):
        name = f"{r.data.tags['factor.D1']} r{r.data.tags['replicate']}"
        out += [(name, m.step, round(m.value, 9)) for m in client.get_metric_history(r.info.run_id, metric)]
    return sorted(out)


def test_restart_sigkill_resume_recover_and_a_notebook_on_the_server(server, tmp_path, corpus_dir,
                                                                     quick_target):
    from mlflow.tracking import MlflowClient

    spec = _spec(tmp_path, corpus_dir, "team", 30, quick_target)
    storage = tmp_path / "st"
    args = ["--storage", str(storage), "--tracking-uri", server.url]
    log = open(tmp_path / "driver.log", "w")  # read on a failure: what the driver saw
    driver = subprocess.Popen([sys.executable, "-m", "trials.cli", "run", str(spec), *args], cwd=tmp_path,
                              env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    client = MlflowClient(server.url)

    def kids():
        exp = client.get_experiment_by_name("team")
        return client.search_runs([exp.experiment_id], "tags.trial_key != ''") if exp else []

    def wait_until(ready, what):
        deadline = time.time() + 300
        while not ready():
            assert time.time() < deadline and driver.poll() is None, f"{what}: the driver exited {driver.poll()}"
            time.sleep(1)

    try:
        wait_until(lambda: any("tf/tau" in r.data.metrics for r in kids()), "a trial reporting")
        server.stop()  # the server restarts mid-sweep: the driver's writes wait and go on
        time.sleep(5)
        server.start()
        wait_until(lambda: any(r.info.status == "FINISHED" for r in kids()), "a trial finishing")
        os.killpg(driver.pid, signal.SIGKILL)  # the driver's machine dies
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    rc, out, err = _cli("trials.cli", "status", "team", *args, cwd=tmp_path)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert not [r for r in kids() if r.info.status == "RUNNING"]  # status closed the dead driver's runs
    rc, out, err = _cli("trials.cli", "resume", "team", *args, cwd=tmp_path)
    assert rc == 0, err[-3000:]
    assert "View run" not in out + (tmp_path / "driver.log").read_text()  # MLflow's own lines, silenced
    assert len(kids()) == 4 and all(r.info.status == "FINISHED" for r in kids())
    # through the restart, the SIGKILL and the resume: each run's points once per step, and
    # every point Tune's files hold in storage is in the store with its value
    points = _store_points(client, "team", "tf/tau")
    assert len({(k, step) for k, step, _ in points}) == len(points)
    assert len(points) == 4 * 11, (sorted(set((k, s) for k in ("a r0", "a r1", "b r0", "b r1") for s in range(0, 31, 3))
                                          - {(k, step) for k, step, _ in points}),
                                   (tmp_path / "driver.log").read_text()[-4000:])
    tune = _tune_points(storage / "team", "tf/tau")
    assert set(tune) <= set(points) and len(tune) >= len(points) - 1, sorted(set(points) - set(tune))

    # the store is lost: `recover` rebuilds the sweep into a fresh database on a second server
    subprocess.run([_bin("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(server.pg_port), "-U", "mlflow",
                    "mlflow_recovered"], check=True, capture_output=True)
    home = tmp_path / "second"
    home.mkdir()
    second = Server(f"postgresql+psycopg2://mlflow@127.0.0.1:{server.pg_port}/mlflow_recovered",
                    home / "artifacts", home)
    second.start()
    try:
        rc, out, err = _cli("trials.cli", "recover", "team", "--storage", str(storage), "--tracking-uri", second.url,
                            cwd=tmp_path)
        assert rc == 0 and "4 of 4 trials finished" in out, err[-2000:]
        for metric in ("tf/tau", "val/bpb", "train/loss"):  # what storage held, each point at its step
            assert _store_points(MlflowClient(second.url), "team", metric) == _tune_points(storage / "team", metric)
        rc, out, err = _cli("analysis.cli", "notebook", "attribution", "team", "--tracking-uri", second.url,
                            "--responses", "tf/tau", "--out", str(tmp_path / "nb"), cwd=tmp_path)
        assert rc == 0 and "Traceback" not in err, err[-3000:]
        import nbformat

        nb = nbformat.read(tmp_path / "nb" / "team" / "attribution.ipynb", as_version=4)
        outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
        assert outputs and not [o for o in outputs if o.get("output_type") == "error"]
        assert any("D1" in str(o.get("text", "")) + str(o.get("data", {})) for o in outputs)
    finally:
        second.stop()


def test_the_reading_commands_read_the_server_as_mlflow_does(server):
    """`status`, `list` and `plan` read a tracking server through its REST API without
    importing MLflow (trials.store.reader): on this PostgreSQL-backed server they read what
    MLflow's own client reads."""
    from mlflow.tracking import MlflowClient

    from trials.store.reader import RestReader, reading_client

    from .store.test_reader import assert_reads_alike, populate

    client = MlflowClient(server.url)
    populate(client)
    reader = reading_client(server.url)
    assert isinstance(reader, RestReader)
    assert_reads_alike(reader, client)


def test_two_drivers_of_one_name_started_together_on_the_server(server, tmp_path, corpus_dir, quick_target):
    """The claim on PostgreSQL behind `mlflow server`: two processes at a barrier, then two
    `trials run` of one name into two storages started together; one wins, one line for the
    other (trials/driver/identity.py `claim`)."""
    from .test_claim import check_one_won, claim_races, race_two_drivers

    claim_races(server.url, tmp_path, rounds=2)
    spec = _spec(tmp_path, corpus_dir, "race", 6, quick_target)
    rcs, errs = race_two_drivers(tmp_path, spec, server.url, _env(tmp_path))
    check_one_won(rcs, errs, server.url, "race", 4)
