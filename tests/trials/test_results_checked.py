"""A trial's results are checked when it ends (trials/registry.py `results_problem`,
trials/trainable.py): a primary response never reported, not a number, or not finite fails
the trial with a line naming the run and the metric, and the report names such runs."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trials.registry import results_problem

ROOT = Path(__file__).resolve().parents[2]
# the toy, but reporting text for its primary response: what a workload with a bug does
BAD = '''
from tests.toy.workload import ToyWorkload
from trials.workload_defaults import TrainContext


class TextLoss(ToyWorkload):
    def train(self, cfg, context):
        def wrong(metrics, checkpoint_dir):
            context({**metrics, "val/loss": "low"}, checkpoint_dir)
        return super().train(cfg, TrainContext(wrong, context.resume_from, context.before_step))


WORKLOAD = TextLoss()
'''


@pytest.mark.parametrize("metrics, words", [
    ({}, "primary response 'val/loss' was never reported"),
    ({"val/loss": "low"}, "primary response 'val/loss' is str 'low', not a number"),
    ({"val/loss": [1.0]}, "is list '[1.0]', not a number"),
    ({"val/loss": True}, "is bool 'True', not a number"),
    ({"val/loss": math.nan}, "is nan, not a finite number"),
    ({"val/loss": math.inf}, "is inf, not a finite number"),
])
def test_a_primary_response_that_is_no_finite_number_is_named(metrics, words):
    assert words in results_problem(metrics, ["val/loss"])
    assert results_problem({"val/loss": 0.3}, ["val/loss"]) is None
    assert results_problem({}, ["spec/speedup"], timed=lambda n: n == "spec/speedup") is None  # the pass's


def test_a_trial_reporting_text_fails_and_the_report_names_it(tmp_path):
    (tmp_path / "badmod.py").write_text(BAD)
    spec = {"workload": "badmod:WORKLOAD", "name": "bad", "base": {"steps": 20, "eval_interval": 10},
            "factors": {"norm": {"none": {"norm": "none"}, "layer": {"norm": "layer"}}},
            "responses": {"val/loss": {"margin": 0.02}}, "max_concurrent": 1}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
           "DSPARK_SWEEPS_WORKLOADS": "badmod:WORKLOAD"}
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    r = subprocess.run([sys.executable, "-m", "trials.cli", "run", "bad.yaml", "--tracking-uri", uri], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0 and "2 failed" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    from mlflow.tracking import MlflowClient

    from trials.store.keys import ERROR_TAG, sweep_trials

    client = MlflowClient(uri)
    runs = sweep_trials(client, client.get_experiment_by_name("bad").experiment_id)
    assert len(runs) == 2 and all(x.info.status == "FAILED" for x in runs)
    for x in runs:
        assert f"run {x.info.run_name}: reported val/loss = 'low' (str), not a number" in x.data.tags[ERROR_TAG]
    a = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "bad", "--tracking-uri", uri, "--no-log"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    said = " ".join((a.stdout + a.stderr).split())
    assert "reported val/loss = 'low' (str), not a number" in said, said[-2000:]
