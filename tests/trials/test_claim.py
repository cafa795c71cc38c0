"""One driver per sweep name, even at the same instant (trials/driver/identity.py `claim`): two
drivers of one name, started together with two storages (or another workload in the same
storage), on one store: exactly one runs; the other is refused in one line before Ray
starts, and the store holds one sweep's runs, each metric point once. On SQLite here; on the
PostgreSQL-backed `mlflow server` in test_postgres.py (`race_two_drivers`)."""

import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from trials.store.keys import TRIAL_KEY_TAG, sweep_trials

from .conftest import quick_spec

ROOT = Path(__file__).resolve().parents[2]


def race_two_drivers(tmp_path, spec: Path, uri: str, env: dict) -> tuple[list, list]:
    """Two `trials run` of one spec into two storages, started together: (return codes,
    their stderr), in start order."""
    procs = [subprocess.Popen([sys.executable, "-m", "trials.cli", "run", str(spec), "--storage",
                               str(tmp_path / f"storage{i}"), "--tracking-uri", uri], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    return [p.returncode for p in procs], [err for _, err in outs]


def check_one_won(rcs, errs, uri: str, name: str, trials: int) -> None:
    assert sorted(rcs) == [0, 2], (rcs, [e[-1500:] for e in errs])
    lost = errs[rcs.index(2)].strip().splitlines()
    assert len(lost) == 1 and f"sweep {name!r}" in lost[0] and ("claimed" in lost[0] or "already exists" in lost[0]), lost
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = sweep_trials(client, exp.experiment_id)
    assert len(runs) == trials and len({r.data.tags[TRIAL_KEY_TAG] for r in runs}) == trials
    parents = client.search_runs([exp.experiment_id], "tags.sweep_parent = 'true'")
    assert len(parents) == 1
    for r in runs:
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "tf/tau")]
        assert len(steps) == len(set(steps)), steps  # each point once


def test_two_drivers_of_one_name_started_together_on_sqlite(tmp_path, corpus_dir, quick_target):
    spec = quick_spec(tmp_path, corpus_dir, "race", 6, target=quick_target)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rcs, errs = race_two_drivers(tmp_path, spec, uri, env)
    check_one_won(rcs, errs, uri, "race", 2)


def test_another_workload_under_the_same_name_and_storage_is_not_a_rerun(tmp_path, corpus_dir, quick_target):
    """The fingerprint includes the workload: the toy under the DSpark sweep's name and storage
    is refused in one line, and the saved spec is not rewritten."""
    import yaml

    spec = quick_spec(tmp_path, corpus_dir, "mine", 6, target=quick_target)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--storage", str(tmp_path / "st"), "--tracking-uri", uri]
    first = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(spec), *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    saved = (tmp_path / "st" / "mine" / "spec.yaml").read_text()
    toy = {"workload": "tests.toy.workload:WORKLOAD", "name": "mine", "base": {"steps": 5},
           "factors": {"D1": {"a": {"norm": "none"}, "b": {"norm": "layer"}}}}
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(toy))
    other = subprocess.run([sys.executable, "-m", "trials.cli", "run", "toy.yaml", *args], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    lines = other.stderr.strip().splitlines()
    assert other.returncode == 2 and len(lines) == 1 and "sweep 'mine'" in lines[0], other.stderr[-2000:]
    assert (tmp_path / "st" / "mine" / "spec.yaml").read_text() == saved


def _claim_at_barrier(barrier, uri: str, name: str, root: str, out) -> None:
    from trials import validate
    from trials.driver.identity import claim

    spec = validate.parse({"name": name, "base": {"preset": "tiny"},
                           "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    barrier.wait()  # both read "no such sweep" before either writes, if reading decided
    try:
        claim(spec, uri, Path(root), "run")
        out.put("won")
    except ValueError as e:
        out.put(str(e))


def claim_races(uri: str, tmp_path, rounds: int = 3) -> None:
    """Two processes claim one name at the same instant, `rounds` times: one wins each time."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    for i in range(rounds):
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_at_barrier, args=(barrier, uri, f"n{i}", str(tmp_path / f"root{j}"), out))
                 for j in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        said = sorted(out.get(timeout=10) for _ in procs)
        assert said[-1] == "won" and said[0] != "won" and "is claimed in the store" in said[0], said


def test_the_claim_is_one_atomic_write(tmp_path):
    from trials.store.client import tracking_client

    uri = f"sqlite:///{tmp_path / 'claims.db'}"
    tracking_client(uri)  # the store's tables made once, as a first command makes them
    claim_races(uri, tmp_path)
