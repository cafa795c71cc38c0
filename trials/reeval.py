"""`trials reeval NAME --spec-prompts N --eval-batches M`: the final evaluation of every
finished trial again, from its final checkpoint, on more prompts (`--spec-prompts`: the
speculative evaluation, drafter stage only) or on more held-out batches (`--eval-batches`:
`val/bpb` and the teacher-forced `tf/*`, any stage), or both. Nothing trains: the LM, the
drafter, the head and the shared target are the ones the trial ended with.

The M batches are the validation split's, drawn as the trainer draws them, the trial's own
`eval_batches` first (`dspark.data.held_out_batches`); the evaluation records its
jackknife over them (`jack/<R>@g<k>`), from which the analysis splits the evaluation's share
of each response's noise from the seeds'. In a backbone sweep the checkpoint holds the LM
that trained; in the drafter stage `val/bpb` is the shared target's (constant across arms).

Each re-evaluation is a Ray task (the trial's own resources, on a local Ray or the
cluster at `--address`). Its metrics go to the trial's own MLflow run as a new evaluation,
at the step after the run's last one, with `split/prompts` = N and the tag
`reeval.spec_prompts` = N, and `split/eval_batches` = M and the tag `reeval.eval_batches`
= M, so the analysis (which reads each metric's latest value) uses the new evaluation while
the old one stays in the metric history at its own step. The per-prompt statistics go
beside it as the artifact `eval/per_prompt_<N>.json`, and its recorded rounds (confidences,
accepted lengths, prompts) as `eval/rounds_<N>.npz`. Each evaluation is kept in storage
first (`trials.store.kept`), so that `trials recover` rebuilds it with the sweep.

Refused before any work (nothing printed, Ray not started), with one line: neither flag, a
count that is not an integer >= 2, `--spec-prompts` on a backbone sweep, a sweep with a
trial that finished without a checkpoint in storage, or one that does not load
(`check_checkpoints`), or whose shared target is gone, or that another driver holds (the
line names its command). Resumable: a run already tagged with
the same count is not evaluated again for it, so an interrupted reeval continues where it
stopped.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import ray
from trials.store.runs import log_metrics
from trials.store.keys import BATCHES_TAG, REEVAL_TAG, TRIAL_KEY_TAG, sweep_parent, sweep_trials
from trials.store.kept import keep_run_record
from trials.store.client import tracking_client

from . import cluster, layout, saved, shared
from .lease import Lease
from .identity import check_same_sweep



@ray.remote(max_retries=1)
def reeval_task(wl, config: dict, checkpoint_dir: str, n_prompts: int, n_batches: int = 0
                ) -> tuple[dict, dict | None, bytes | None]:
    """(metrics, per-prompt statistics or None, recorded rounds as .npz bytes or None) of one
    trial's final checkpoint on n_prompts prompts and n_batches held-out batches (0: that
    part not asked for): the workload's `reevaluate`, on the task's CPUs."""
    import torch

    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    return wl.reevaluate(config, checkpoint_dir, n_prompts, n_batches)


def check_counts(spec_prompts: int | None, eval_batches: int | None) -> None:
    """One line naming a count that is not an integer >= 2, or the lack of both."""
    if spec_prompts is None and eval_batches is None:
        raise ValueError("reeval: give --spec-prompts N, --eval-batches N, or both")
    for flag, n in (("--spec-prompts", spec_prompts), ("--eval-batches", eval_batches)):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 2):
            raise ValueError(f"{flag}: an integer >= 2, got {n!r}")


def reeval(name: str, storage: str | None, spec_prompts: int | None = None, tracking_uri: str | None = None,
           address: str | None = None, say=print, eval_batches: int | None = None) -> dict:
    """Re-evaluate every finished trial of a sweep; returns {"done": n, "skipped": n}."""
    check_counts(spec_prompts, eval_batches)
    spec, meta = saved.load_saved(name, storage, "reeval")
    uri = tracking_uri or meta["tracking_uri"]
    problem = next(filter(None, (spec.wl.reeval_problem(t.config, spec_prompts, eval_batches)
                                 for t in spec.trials)), None)
    if problem:
        raise ValueError(f"reeval: sweep {name!r}: {problem}")
    root = saved.storage_root(storage)
    check_same_sweep(spec, uri, root, "reeval")
    client = tracking_client(uri)
    runs, finished, checkpoints = finished_trials(client, spec, root, uri)
    asks = {t.key: _asked(runs[t.key].data.tags, spec_prompts, eval_batches) for t in finished}
    todo = [t for t in finished if any(asks[t.key])]
    bound = bind_existing_targets(spec, root)
    with Lease(root / name, name, f"trials reeval {name}"):
        check_checkpoints({t.key: checkpoints[t.key] for t in todo}, bound, spec.wl)  # before Ray starts
        say(f"{name}: re-evaluating {len(todo)} trial(s) with {_what(spec_prompts, eval_batches)} "
            f"({len(finished) - len(todo)} already done)")
        started = cluster.init_ray(address)
        try:
            res = {"num_cpus": spec.resources.get("cpu", 1), "num_gpus": spec.resources.get("gpu", 0)}
            pending = {reeval_task.options(**res).remote(spec.wl, bound[t.key].to_dict(), checkpoints[t.key],
                                                         *asks[t.key]): t for t in todo}
            done = 0
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                t = pending.pop(ready[0])
                metrics, per_prompt, rounds = ray.get(ready[0])
                _log_evaluation(client, runs[t.key], root / name, metrics, per_prompt, rounds, *asks[t.key])
                done += 1
                say(f"{name}: {done}/{len(todo)} {t.run_name}: " + ", ".join(
                    f"{k} {metrics[k]:.4f}" for k in spec.wl.registry.headline() if k in metrics))
        finally:
            if started:
                ray.shutdown()
    return {"done": done, "skipped": len(finished) - len(todo)}


def check_checkpoints(checkpoints: dict[str, str], configs: dict, wl, command: str = "reeval") -> None:
    """Every checkpoint a pass will load, checked here first by the workload
    (`finished_problem`): one line naming the first that cannot be loaded, or is not a
    finished trial's, before Ray starts (a Ray task's failure comes back as its traceback)."""
    for key, ckpt in checkpoints.items():
        problem = wl.finished_problem(ckpt, configs[key])
        if problem:
            raise ValueError(f"{command}: trial {key}: {problem}")


def _asked(tags: dict, spec_prompts: int | None, eval_batches: int | None) -> tuple[int, int]:
    """(prompts, batches) a run still needs: a count it is already tagged with is 0."""
    prompts = spec_prompts if spec_prompts and tags.get(REEVAL_TAG) != str(spec_prompts) else 0
    batches = eval_batches if eval_batches and tags.get(BATCHES_TAG) != str(eval_batches) else 0
    return prompts, batches


def _what(spec_prompts: int | None, eval_batches: int | None) -> str:
    parts = [f"{spec_prompts} prompts" if spec_prompts else "", f"{eval_batches} held-out batches" if eval_batches else ""]
    return " and ".join(p for p in parts if p)


def finished_trials(client, spec, root: Path, uri: str, command: str = "reeval",
                    checkpoints: bool = True) -> tuple[dict, list, dict[str, str]]:
    """The sweep's runs by trial key, its finished trials and each one's final checkpoint;
    refused with one line (naming `command`) when the store lacks the sweep, or (unless
    `checkpoints` is False) a finished trial's checkpoint is gone."""
    exp = client.get_experiment_by_name(spec.name)
    if exp is None or sweep_parent(client, exp.experiment_id) is None:
        raise ValueError(f"{command}: the store {uri} holds no sweep {spec.name!r}")
    runs = {r.data.tags.get(TRIAL_KEY_TAG): r for r in sweep_trials(client, exp.experiment_id)}
    finished = [t for t in spec.trials if t.key in runs and runs[t.key].info.status == "FINISHED"]
    found = layout.latest_checkpoints(root / spec.name, finished, spec.wl) if checkpoints else {}
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


def _log_evaluation(client, run, exp_dir: Path, metrics: dict, per_prompt: dict | None, rounds: bytes | None,
                    spec_prompts: int, eval_batches: int) -> None:
    """The new evaluation as the run's next step, its per-prompt and rounds files, and last
    the tags that mark the trial done (so an interrupted reeval redoes exactly the trials
    without them). Kept in storage first (`trials.store.kept`): a record the store lacks is
    replayed by `trials recover`, while one the store alone held was lost with it."""
    step = next_step(client, run)
    files: dict[str, bytes] = {}
    tags: dict[str, str] = {}
    if spec_prompts:
        files[f"eval/per_prompt_{spec_prompts}.json"] = json.dumps(per_prompt).encode()
        if rounds is not None:
            files[f"eval/rounds_{spec_prompts}.npz"] = rounds
        tags[REEVAL_TAG] = str(spec_prompts)
    if eval_batches:
        tags[BATCHES_TAG] = str(eval_batches)
    keep_run_record(exp_dir, run.data.tags[TRIAL_KEY_TAG], "reeval", step, metrics, tags, files)
    log_metrics(client, run.info.run_id, metrics, step)
    with tempfile.TemporaryDirectory() as tmp:
        for path, data in files.items():
            local = Path(tmp) / path.rpartition("/")[2]
            local.write_bytes(data)
            client.log_artifact(run.info.run_id, str(local), artifact_path="eval")
    for k, v in tags.items():
        client.set_tag(run.info.run_id, k, v)


def bind_existing_targets(spec, root: Path, command: str = "reeval") -> dict:
    """trial key -> its config pointing at the shared artifact in storage; refused with one
    line (naming `command`) when one is gone (re-evaluating or timing must not train one)."""
    found = shared.addresses(spec)
    paths = shared.in_storage(spec, root, found)
    for h in shared.needed(spec, found):
        if h not in paths:
            raise ValueError(f"{command}: the shared target {h} is gone from {spec.wl.shared.file(root, h).parent}; "
                             f"{command} never trains one")
    return {t.key: t.config for t in shared.bound(spec, found, paths)[0].trials}
