"""A user's trainer that raises: each trial is tried once (a retry would raise the same), its
run FAILED with the cause in one line (type and message), the traceback kept in the trial's
folder; the sweep's summary, `trials status` and the parent run name the cause. From a user's
own folder, on real Ray and MLflow, through the CLI."""

import os
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

WORKLOAD = '''
from dataclasses import dataclass


@dataclass
class Config:
    lr: float = 0.1
    calls: str = ""
    seed: int = 0


def train(cfg, report):
    with open(cfg.calls, "a") as f:  # one line per attempt
        f.write(f"{cfg.lr}\\n")
    raise ValueError(f"lr {cfg.lr} diverged at step 1")


class Raising:
    name = "raising"
    config = Config
    train = staticmethod(train)
    metrics = {"val/loss": {"better": "lower", "margin": 0.1}}


WORKLOAD = Raising()
'''


def _cli(cwd, *args, package="trials"):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSPARK_SWEEPS_WORKLOADS")}
    return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_trainer_that_raises_costs_one_attempt_a_trial_and_is_named_once(tmp_path):
    (tmp_path / "raising.py").write_text(WORKLOAD)
    calls = tmp_path / "calls.txt"
    (tmp_path / "s.yaml").write_text(
        "name: raising\nworkload: raising:WORKLOAD\n"
        f"base: {{calls: {calls}}}\n"
        "factors: {lr: {low: {lr: 0.1}, high: {lr: 0.5}}}\nreplicates: 1\nmax_failures: 2\nmax_concurrent: 2\n")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    store = ["--tracking-uri", uri, "--storage", str(tmp_path / "st")]
    r = _cli(tmp_path, "run", "s.yaml", *store)
    out = r.stdout + r.stderr
    assert r.returncode == 1 and "0 finished, 2 failed" in r.stdout, out[-3000:]
    assert sorted(calls.read_text().split()) == ["0.1", "0.5"], out[-3000:]  # once each, max_failures 2 or not
    for lr in ("0.1", "0.5"):
        line = next(x for x in r.stdout.splitlines() if x.startswith("failed: 1 trial(s)") and f"lr {lr} " in x)
        assert line.endswith(f"ValueError: lr {lr} diverged at step 1") or "ValueError: lr " in line, line
    assert "Traceback" not in r.stdout and out.count(f"lr 0.5 diverged") <= 3, out[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("raising")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parent = next(x for x in runs if x.data.tags.get("sweep_parent") == "true")
    kids = [x for x in runs if "trial_key" in x.data.tags]
    assert len(kids) == 2 and all(k.info.status == "FAILED" for k in kids)
    for k in kids:
        cause = k.data.tags["error"]
        assert cause.startswith("ValueError: lr ") and "diverged at step 1 (traceback: " in cause, cause
        kept = Path(cause.split("(traceback: ", 1)[1].rstrip(")"))
        assert kept.is_file() and "Traceback (most recent call last)" in kept.read_text()
        assert "restarts" not in k.data.tags  # never restarted
    assert parent.info.status == "FAILED" and parent.data.tags["error"].count("failed: 1 trial(s)") == 2
    s = _cli(tmp_path, "status", "raising", "--storage", str(tmp_path / "st"))
    assert s.returncode == 0 and s.stdout.count("failed") >= 2, s.stdout
    assert "ValueError: lr 0.1 diverged at step 1" in s.stdout and "ValueError: lr 0.5 diverged" in s.stdout, s.stdout


TYPO = '''
from dataclasses import dataclass


@dataclass
class Config:
    lr: float = 0.1
    warmup: int = 10
    seed: int = 0


def train(cfg, report):
    report({"val/los": 1.0})  # a typo of the declared val/loss


class Typo:
    name = "typo"
    config = Config
    train = staticmethod(train)
    metrics = {"val/loss": {"better": "lower", "margin": 0.1}}


WORKLOAD = Typo()


class OneArg(Typo):
    train = staticmethod(lambda cfg: None)


ONE_ARG = OneArg()
'''


def test_a_wrong_value_signature_or_metric_name_is_named_before_or_at_the_first_report(tmp_path):
    (tmp_path / "typo.py").write_text(TYPO)
    spec = "name: typo\nworkload: typo:WORKLOAD\nfactors: {lr: {low: {lr: 0.1}, high: {lr: 0.5}}}\nreplicates: 1\n"
    (tmp_path / "bad.yaml").write_text(spec.replace("replicates: 1", "replicates: 1\nbase: {warmup: forty}"))
    v = _cli(tmp_path, "validate", "bad.yaml")
    assert v.returncode == 2 and "warmup: an integer, got 'forty' (str)" in v.stderr, v.stdout + v.stderr
    assert len(v.stderr.strip().splitlines()) <= 2, v.stderr
    (tmp_path / "flag.yaml").write_text(spec.replace("{lr: 0.5}", "{lr: fast}"))
    v = _cli(tmp_path, "validate", "flag.yaml")
    assert v.returncode == 2 and "lr: a number, got 'fast' (str)" in v.stderr, v.stdout + v.stderr
    (tmp_path / "resp.yaml").write_text(spec + "responses: {val/los: {better: lower, margin: 0.1}}\n")
    v = _cli(tmp_path, "validate", "resp.yaml")  # the user's workload's own metrics, not DSpark's doc
    assert v.returncode == 2 and "responses.val/los: not a metric the trainer reports (its metrics: val/loss)" in \
        v.stderr, v.stderr
    (tmp_path / "one.yaml").write_text(spec.replace("typo:WORKLOAD", "typo:ONE_ARG"))
    v = _cli(tmp_path, "validate", "one.yaml")
    assert v.returncode == 2 and "train must take (config, context); its signature is train(cfg)" in v.stderr, v.stderr
    (tmp_path / "s.yaml").write_text(spec)
    r = _cli(tmp_path, "run", "s.yaml", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "--storage",
             str(tmp_path / "st"))
    assert r.returncode == 1 and "0 finished, 2 failed" in r.stdout, (r.stdout + r.stderr)[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("failed: "))
    assert line.startswith("failed: 2 trial(s), e.g. ") and (
        "TrialResultsError: reported 'val/los', not among the workload's metrics: declare it in `metrics` or rename "
        "it (traceback: ") in line, r.stdout
    kept = Path(line.split("(traceback: ", 1)[1].rstrip(")"))
    assert kept.is_file() and kept.is_relative_to(tmp_path / "st")  # in the sweep's storage, beside Tune's records


NUMBERS = '''
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Config:
    lr: float = 0.1
    seed: int = 0


def train(cfg, report):
    noise = np.random.default_rng(cfg.seed).normal(0, 0.01)
    report({"val/loss": np.float32(1.0 + cfg.lr + noise), "val/acc": torch.tensor(0.5 + noise)})


class Numbers:
    name = "numbers"
    config = Config
    train = staticmethod(train)
    metrics = {"val/loss": {"better": "lower", "margin": 0.1}, "val/acc": "higher"}


WORKLOAD = Numbers()
'''


def test_numpy_numbers_and_0d_tensors_are_numbers_everywhere(tmp_path):
    """A metric reported as np.float32 or a 0-d tensor reaches the store as a number (it used
    to vanish from MLflow, and fail the trial as a primary response)."""
    (tmp_path / "counted.py").write_text(NUMBERS)  # not numbers.py: the folder is on the path, beside the stdlib
    (tmp_path / "s.yaml").write_text("name: numbers\nworkload: counted:WORKLOAD\n"
                                     "factors: {lr: {low: {lr: 0.1}, high: {lr: 0.5}}}\nreplicates: 1\n")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    r = _cli(tmp_path, "run", "s.yaml", "--tracking-uri", uri, "--storage", str(tmp_path / "st"))
    assert r.returncode == 0 and "2 finished, 0 failed" in r.stdout, (r.stdout + r.stderr)[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("numbers")
    kids = [x for x in client.search_runs([exp.experiment_id]) if "trial_key" in x.data.tags]
    assert len(kids) == 2
    for k in kids:
        lr = float(k.data.params["lr"])
        assert abs(k.data.metrics["val/loss"] - (1.0 + lr)) < 0.05 and abs(k.data.metrics["val/acc"] - 0.5) < 0.05


SAME_ERROR = WORKLOAD.replace('raise ValueError(f"lr {cfg.lr} diverged at step 1")',
                              'raise RuntimeError("CUDA out of memory at step 1")')


def test_a_trainer_that_fails_the_same_way_in_every_cell_stops_the_sweep_early(tmp_path):
    """The first trial of each cell fails with one cause: the sweep stops there (not 8 trials
    to the same error), says so in one short line with a run that shows it and the command
    that goes on, and leaves the rest unrun, the parent FAILED."""
    (tmp_path / "raising.py").write_text(SAME_ERROR)
    calls = tmp_path / "calls.txt"
    (tmp_path / "s.yaml").write_text(
        "name: raising\nworkload: raising:WORKLOAD\n"
        f"base: {{calls: {calls}}}\n"
        "factors: {lr: {low: {lr: 0.1}, high: {lr: 0.5}}}\nreplicates: 4\nmax_concurrent: 1\n")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    r = _cli(tmp_path, "run", "s.yaml", "--tracking-uri", uri, "--storage", str(tmp_path / "st"))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert 2 <= len(calls.read_text().split()) <= 3, out[-3000:]  # one a cell (and at most one started meanwhile)
    said = [x for x in r.stdout.splitlines() if "stopped early" in x]
    assert len(said) == 1 and len(said[0]) < 400, said
    assert "the first trial of each of the 2 cell(s) failed with the same error" in said[0]
    assert "RuntimeError: CUDA out of memory at step 1" in said[0] and said[0].endswith("trials resume raising")
    assert "failed: " not in r.stdout  # the cause once, not a line per failure
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("raising")
    runs = c.search_runs([exp.experiment_id], "", max_results=100)
    parent = next(x for x in runs if x.data.tags.get("sweep_parent") == "true")
    assert parent.info.status == "FAILED"
    kids = [x for x in runs if "trial_key" in x.data.tags]
    assert len(kids) <= 3 and not any(k.info.status in ("RUNNING", "FINISHED") for k in kids)
