"""`trials reeval NAME --spec-prompts N`: the final speculative evaluation of every
finished trial again, from its final checkpoint, with N prompts. Nothing trains: the
drafter, head and shared target are the ones the trial ended with.

Each re-evaluation is a Ray task (the trial's own resources, on a local Ray or the
cluster at `--address`). Its metrics go to the trial's own MLflow run as a new evaluation,
at the step after the run's last one, with `split/prompts` = N among them and the tag
`reeval.spec_prompts` = N, so the analysis (which reads each metric's latest value) uses
the new evaluation while the old one stays in the metric history at its own step. The
per-prompt statistics go beside it as the artifact `eval/per_prompt_<N>.json`.

Refused before any work, with one line: a sweep with a trial that finished without a
checkpoint in storage, or whose shared target is gone. Resumable: a run already tagged
with the same N is skipped, so an interrupted reeval continues where it stopped.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import ray

REEVAL_TAG = "reeval.spec_prompts"


@ray.remote(max_retries=1)
def reeval_task(config: dict, checkpoint_dir: str, n_prompts: int) -> tuple[dict, dict]:
    """(metrics, per-prompt statistics) of one trial's final checkpoint at n_prompts."""
    import torch

    from dspark.config import from_dict
    from dspark.speculative_eval import PER_PROMPT_FILE
    from dspark.train import Trainer

    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    with tempfile.TemporaryDirectory(prefix="dspark-reeval-") as tmp:
        cfg = from_dict({**config, "out_dir": tmp})
        trainer = Trainer(cfg)
        trainer.load_checkpoint(checkpoint_dir)
        if trainer.stage != "done":
            raise ValueError(f"reeval: {checkpoint_dir} is not a finished trial's checkpoint (stage {trainer.stage})")
        metrics = trainer.speculative(n_prompts, full=True)
        per_prompt = json.loads((Path(tmp) / "artifacts" / PER_PROMPT_FILE).read_text())
    return metrics, per_prompt


def reeval(name: str, storage: str | None, spec_prompts: int, tracking_uri: str | None = None,
           address: str | None = None, say=print) -> dict:
    """Re-evaluate every finished trial of a sweep; returns {"done": n, "skipped": n}."""
    from dspark.record import tracking_client

    from . import runner
    from .lease import Lease

    if not isinstance(spec_prompts, int) or isinstance(spec_prompts, bool) or spec_prompts < 2:
        raise ValueError(f"--spec-prompts: an integer >= 2, got {spec_prompts!r}")
    spec, meta = runner.load_saved(name, storage, "reeval")
    uri = tracking_uri or meta["tracking_uri"]
    if any(t.config.parallel_stage != "drafter" for t in spec.trials):
        raise ValueError(f"reeval: sweep {name!r} has backbone-stage trials, which decode nothing")
    root = runner.storage_root(storage)
    client = tracking_client(uri)
    runs, finished, checkpoints = finished_trials(client, spec, root, uri)
    todo = [t for t in finished if runs[t.key].data.tags.get(REEVAL_TAG) != str(spec_prompts)]
    bound = bind_existing_targets(spec, root)
    say(f"{name}: re-evaluating {len(todo)} trial(s) with {spec_prompts} prompts "
        f"({len(finished) - len(todo)} already done)")
    with Lease(root / name, name, "trials reeval"):
        started = runner.init_ray(address)
        try:
            res = {"num_cpus": spec.resources.get("cpu", 1), "num_gpus": spec.resources.get("gpu", 0)}
            pending = {reeval_task.options(**res).remote(bound[t.key].to_dict(), checkpoints[t.key], spec_prompts): t
                       for t in todo}
            done = 0
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                t = pending.pop(ready[0])
                metrics, per_prompt = ray.get(ready[0])
                _log_evaluation(client, runs[t.key], metrics, per_prompt, spec_prompts)
                done += 1
                say(f"{name}: {done}/{len(todo)} {t.run_name}: spec/tau {metrics.get('spec/tau', float('nan')):.3f} "
                    f"with {spec_prompts} prompts")
        finally:
            if started:
                ray.shutdown()
    return {"done": done, "skipped": len(finished) - len(todo)}


def finished_trials(client, spec, root: Path, uri: str, command: str = "reeval",
                    checkpoints: bool = True) -> tuple[dict, list, dict[str, str]]:
    """The sweep's runs by trial key, its finished trials and each one's final checkpoint;
    refused with one line (naming `command`) when the store lacks the sweep, or (unless
    `checkpoints` is False) a finished trial's checkpoint is gone."""
    from dspark.record import TRIAL_KEY_TAG, sweep_parent, sweep_trials

    from . import runner

    exp = client.get_experiment_by_name(spec.name)
    if exp is None or sweep_parent(client, exp.experiment_id) is None:
        raise ValueError(f"{command}: the store {uri} holds no sweep {spec.name!r}")
    runs = {r.data.tags.get(TRIAL_KEY_TAG): r for r in sweep_trials(client, exp.experiment_id)}
    finished = [t for t in spec.trials if t.key in runs and runs[t.key].info.status == "FINISHED"]
    found = runner.latest_checkpoints(root / spec.name, finished) if checkpoints else {}
    missing = [t.key for t in finished if t.key not in found] if checkpoints else []
    if missing:
        raise ValueError(f"{command}: {len(missing)} finished trial(s) have no checkpoint under {root / spec.name} "
                         f"(e.g. {missing[0]}); {command} needs each trial's final checkpoint")
    return runs, finished, found


LAST_STEP_KEYS = ("tf/tau", "spec/tau", "timing/rounds")  # logged at a run's every evaluation, or by a pass


def next_step(client, run) -> int:
    """The step after a run's last evaluation, re-evaluation or timing pass: where a new
    one goes, so the analysis (which reads each metric's latest value) reads it."""
    return 1 + max((m.step for key in LAST_STEP_KEYS if key in run.data.metrics
                    for m in client.get_metric_history(run.info.run_id, key)), default=0)


def _log_evaluation(client, run, metrics: dict, per_prompt: dict, spec_prompts: int) -> None:
    """The new evaluation as the run's next step, its per-prompt file, and last the tag that
    marks the trial done (so an interrupted reeval redoes exactly the trials without it)."""
    from dspark.track import log_metrics

    log_metrics(client, run.info.run_id, metrics, next_step(client, run))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"per_prompt_{spec_prompts}.json"
        path.write_text(json.dumps(per_prompt))
        client.log_artifact(run.info.run_id, str(path), artifact_path="eval")
    client.set_tag(run.info.run_id, REEVAL_TAG, str(spec_prompts))


def bind_existing_targets(spec, root: Path, command: str = "reeval") -> dict:
    """trial key -> its config pointing at the shared target in storage; refused with one
    line (naming `command`) when a target is gone (re-evaluating or timing must not train one)."""
    from dspark import targets

    out, cache = {}, {}
    for t in spec.trials:
        cfg = t.config
        if cfg.parallel_stage == "drafter" and not cfg.target_path:
            h, _ = targets.address(cfg, cache)
            path = targets.target_file(root, h)
            if not path.is_file():
                raise ValueError(f"{command}: the shared target {h} is gone from {path.parent}; "
                                 f"{command} never trains one")
            cfg = cfg.replace(target_path=str(path))
        out[t.key] = cfg
    return out
