"""A trial that crashes once resumes from its checkpoint and ends where an uninterrupted
run ends; one that crashes always ends FAILED with its error. Faults are injected through
the trial wrapper's environment variable (`trials.trainable.CRASH_ENV`), not the config, so
this module starts its own Ray, after setting it (the workers inherit the driver's
environment)."""

import json
import math

import ray
import torch
from mlflow.tracking import MlflowClient

from trials.store.keys import store_key
from trials.store.reader import run_items
from dspark.train import train
from tests.conftest import is_timing_metric
from tests.trials.conftest import write_spec
from tests.trials.test_runner import children
from trials import runner, trainable, validate

WINDOWS = {"D1": {w: {"window": w} for w in ("shifted", "ids_only", "aligned")}}


def test_crashed_trial_resumes_from_its_checkpoint(tmp_path, corpus_dir, monkeypatch):
    ray.shutdown()
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "fault", WINDOWS, max_failures=1,
                                   base={"target_steps": 10, "draft_steps": 12, "eval_interval": 5,
                                         "eval_batches": 1, "spec_prompts": 2, "spec_new_tokens": 16,
                                         "spec_prompt_len": 16}))
    key = {t.levels["D1"]: t.key for t in spec.trials}
    # "shifted" crashes after the step-5 checkpoint (resumes from it); "ids_only" crashes
    # before any checkpoint, so every restart starts over and crashes again
    monkeypatch.setenv(trainable.CRASH_ENV, json.dumps({key["shifted"]: 7, key["ids_only"]: 2}))
    out = runner.run(spec, tracking_uri=uri, storage=str(tmp_path / "st"), verbose=0)
    assert out["finished"] == 2 and out["failed"] == 1
    _, parents, kids = children(uri, "fault")
    assert len(kids) == 3 and parents[0].info.status == "FAILED"
    by = {r.data.tags["factor.D1"]: r for r in kids}
    assert by["ids_only"].info.status == "FAILED"
    assert "injected crash at step 2" in by["ids_only"].data.tags["error"]
    assert by["aligned"].info.status == by["shifted"].info.status == "FINISHED"
    assert by["shifted"].data.tags.get("restarts") == "1" and "restarts" not in by["aligned"].data.tags
    assert not any("crash" in k for k in by["shifted"].data.params)  # the fault is no config field
    client = MlflowClient(uri)
    for r in kids:  # the restarted trial logs no step twice
        for k in r.data.metrics:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, k)]
            assert len(steps) == len(set(steps)), (r.data.tags["trial_key"], k, steps)
    # the same config run once without a fault, in this process with the trial's one thread
    # and its shared target, ends with the same metrics
    torch.set_num_threads(1)
    trial = next(t for t in spec.trials if t.levels["D1"] == "shifted")
    cfg = trial.config.replace(target_path=by["shifted"].data.params["target_path"], out_dir=str(tmp_path / "ref")).native()
    ref = {store_key(k): v for k, v in train(cfg).items()
           if not is_timing_metric(k) and math.isfinite(v) and k != "step"}
    held = {**by["shifted"].data.metrics,  # the metrics, and the items its artifact holds
            **{store_key(k): v for k, v in run_items(client, by["shifted"]).items()}}
    got = {k: v for k, v in held.items() if k in ref}
    assert got == ref
