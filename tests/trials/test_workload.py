"""The engine with a workload that is not DSpark (tests/toy/workload.py: a tiny MLP, two
switchable changes), end to end against real Ray and MLflow: validate, run, SIGTERM and
resume, status, augment, the timing pass refused (the toy has none), recover into a new
store, and the report. Nothing in `trials` or `analysis` names the toy: the spec does."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from trials.store.keys import TRIAL_KEY_TAG, WORKLOAD_TAG, sweep_parent, sweep_trials

ROOT = Path(__file__).resolve().parents[2]
TOY = "tests.toy.workload:WORKLOAD"


def _cli(tmp_path, *args, package="trials", timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # Ray's workers import the toy workload by name
    return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _runs(uri: str, name: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return sweep_parent(client, exp.experiment_id), sweep_trials(client, exp.experiment_id)


def test_a_second_workload_goes_through_every_command(tmp_path):
    spec = {"workload": TOY, "name": "toy", "description": "LayerNorm and label smoothing on a tiny MLP",
            "base": {"steps": 40, "eval_interval": 20, "step_sleep_ms": 20.0},
            "factors": {"norm": {"none": {"norm": "none"}, "layer": {"norm": "layer"}},
                        "smooth": {"off": {"label_smoothing": 0.0}, "on": {"label_smoothing": 0.1}}},
            "responses": {"val/loss": {"margin": 0.02}}, "max_concurrent": 1}
    (tmp_path / "toy.yaml").write_text(yaml.safe_dump(spec))
    uri, storage = f"sqlite:///{tmp_path / 'm.db'}", str(tmp_path / "st")
    v = _cli(tmp_path, "validate", "toy.yaml")
    assert v.returncode == 0 and "4 trials" in v.stdout and "val/loss (lower is better" in v.stdout, v.stdout + v.stderr

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "trials.cli", "run", "toy.yaml", "--tracking-uri", uri,
                             "--storage", storage], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:  # stopped once a trial has finished: the others are left to the resume
        if "1/4" in line:
            break
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143, proc.stderr.read()[-2000:]
    parent, runs = _runs(uri, "toy")
    first = {r.data.tags[TRIAL_KEY_TAG]: r.info.end_time for r in runs if r.info.status == "FINISHED"}
    assert first and parent.data.tags[WORKLOAD_TAG] == TOY and not any(r.info.status == "RUNNING" for r in runs)

    r = _cli(tmp_path, "resume", "toy", "--storage", storage)
    assert r.returncode == 0, r.stderr[-2000:]
    _, runs = _runs(uri, "toy")
    assert len(runs) == 4 and all(x.info.status == "FINISHED" for x in runs)
    assert all(x.info.end_time == first[x.data.tags[TRIAL_KEY_TAG]] for x in runs if x.data.tags[TRIAL_KEY_TAG] in first)
    assert {x.data.params["norm"] for x in runs} == {"none", "layer"} and all("val/acc" in x.data.metrics for x in runs)

    s = _cli(tmp_path, "status", "toy", "--storage", storage)
    assert s.returncode == 0 and s.stdout.count("finished") >= 4 and "val/loss" in s.stdout, s.stdout

    a = _cli(tmp_path, "augment", "toy", "--replicates", "1", "--storage", storage)  # one block more
    assert a.returncode == 0, a.stderr[-2000:]
    assert len(_runs(uri, "toy")[1]) == 8

    t = _cli(tmp_path, "time", "toy", "--storage", storage)
    assert t.returncode == 2 and t.stderr.strip().endswith("has no timing pass"), t.stderr

    fresh = f"sqlite:///{tmp_path / 'rebuilt.db'}"
    c = _cli(tmp_path, "recover", "toy", "--storage", storage, "--tracking-uri", fresh)
    assert c.returncode == 0, c.stderr[-2000:]
    parent, runs = _runs(fresh, "toy")
    assert len(runs) == 8 and all(x.info.status == "FINISHED" for x in runs) and parent.info.status == "FINISHED"

    out = tmp_path / "report"
    rep = _cli(tmp_path, "report", "toy", "--tracking-uri", fresh, "--out", str(out), "--no-log", package="analysis")
    assert rep.returncode == 0, rep.stderr[-2000:]
    text = rep.stdout
    assert "val/loss" in text and "norm" in text and "smooth" in text, text
    # the toy's own registry: its default responses (val/acc beside the primary val/loss), none of DSpark's
    assert "val/acc" in (out / "toy" / "report.md").read_text() and "spec/tau" not in text, text
