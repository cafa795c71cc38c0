"""`trials reeval NAME --FIELD N ...`: the final evaluation of every finished trial again, from
its final checkpoint, with more items: each FIELD one of the workload's `reeval_counts` (a
config field with `_` written `-`), N its new count. Nothing trains: the weights (and the
shared artifacts) are the ones the trial ended with. What a count means is the workload's
(docs/extending.md): N prompts decoded, N held-out batches scored, drawn as the trainer
draws them, the trial's own items first, with their jackknife (`trials.store.items`), from
which the analysis splits the evaluation's share of each response's noise from the seeds'.

Each re-evaluation is a Ray task (the trial's own resources, on a local Ray or the cluster
at `--address`) running the workload's `reevaluate`. Its metrics go to the trial's own
MLflow run as a new evaluation, at the step after the run's last one, with the tag
`reeval.<field>` = N for every count it raised, so the analysis (which reads each metric's
latest value) uses the new evaluation while the old one stays in the metric history at its
own step. The files it returns go beside it under the run's `eval/` (the workload's
per-item statistics, say).
Each evaluation is kept in storage first (`trials.store.kept`), so that `trials recover`
rebuilds it with the sweep.

Refused before any work (nothing printed, Ray not started), with one line: a count that is
not an integer >= 2 (before the storage is read), no count or one the workload does not
have, one the workload refuses for the sweep's trials (`reeval_problem`: a count its trials
never evaluate), a sweep with a trial that finished without a
checkpoint in storage, or one that does not load (`check_checkpoints`), or whose shared
target is gone, or that another driver holds (the line names its command). Resumable: a run
already tagged with the same count is not evaluated again for it, so an interrupted reeval
continues where it stopped.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import ray
from trials.store.runs import log_metrics
from trials.store.keys import PARENT_TAG, TRIAL_KEY_TAG, reeval_tag, sweep_parent, sweep_trials
from trials.driver.ledger import keep_parent_registry
from trials.store.kept import keep_run_record
from trials.store.client import tracking_client

from trials import layout, saved
from trials.driver import cluster
from trials.driver import shared_artifacts
from .registry import plain_number
from .lease import Lease
from trials.driver.identity import check_same_sweep



@ray.remote(max_retries=1)
def reeval_task(wl, config: dict, checkpoint_dir: str, counts: dict[str, int]) -> tuple[dict, dict[str, bytes]]:
    """(metrics, {file name: bytes}) of one trial's final checkpoint evaluated with `counts`
    ({count field: n}): the workload's `reevaluate`, on the task's CPUs."""
    import torch

    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    return wl.reevaluate(config, checkpoint_dir, counts)


COUNT_LIMIT = 100_000  # a re-evaluation count where the workload declares no limit of its own


def flag(field: str) -> str:
    """A count field as the command line writes it (`spec_prompts` -> `--spec-prompts`)."""
    return "--" + field.replace("_", "-")


def check_values(counts: dict[str, object]) -> None:
    """One line naming a count that is not an integer >= 2 (no workload needed)."""
    for field, n in counts.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ValueError(f"{flag(field)}: an integer >= 2, got {n!r}")


def check_fields(wl, counts: dict[str, int]) -> None:
    """One line where no count is given, or one the workload's re-evaluation does not count."""
    if not wl.has("reeval"):
        raise ValueError(f"reeval: {wl.reeval_problem(None, counts)}")
    known = [flag(f) + " N" for f in wl.reeval_counts]
    if not counts:
        raise ValueError("reeval: give " + (known[0] if len(known) == 1 else
                                             ", ".join(known[:-1]) + f", {known[-1]}, or " +
                                             ("both" if len(known) == 2 else "several")))
    for field, n in counts.items():
        if field not in wl.reeval_counts:
            raise ValueError(f"reeval: {flag(field)}: workload {wl.name!r} counts no such items "
                             f"(its counts: {', '.join(flag(f) for f in wl.reeval_counts)})")
        most = (wl.reeval_limits or {}).get(field, COUNT_LIMIT)
        if n > most:
            raise ValueError(f"reeval: {flag(field)}: at most {most} (workload {wl.name!r}'s limit for its "
                             f"{wl.reeval_counts[field]}), got {n}")


def reeval(name: str, storage: str | None, counts: dict[str, int], *, tracking_uri: str | None = None,
           address: str | None = None, say=print) -> dict:
    """Re-evaluate every finished trial of a sweep with `counts` ({count field: n}, the
    fields among its workload's `reeval_counts`); returns {"done": n, "skipped": n}.

    >>> reeval("demo", "ray_results", {"spec_prompts": 96})  # doctest: +SKIP
    {'done': 16, 'skipped': 0}
    """
    check_values(counts)
    spec, meta = saved.load_saved(name, storage, "reeval")
    check_fields(spec.wl, counts)
    uri = tracking_uri or meta["tracking_uri"]
    problem = next(filter(None, (spec.wl.reeval_problem(t.config, counts) for t in spec.trials)), None)
    if problem:
        raise ValueError(f"reeval: sweep {name!r}: {problem}")
    root = saved.storage_root(storage)
    check_same_sweep(spec, uri, root, "reeval")
    client = tracking_client(uri)
    runs, finished, checkpoints = finished_trials(client, spec, root, uri)
    asks = {t.key: _asked(runs[t.key].data.tags, counts) for t in finished}
    todo = [t for t in finished if asks[t.key]]
    bound = bind_existing_targets(spec, root)
    with Lease(root / name, name, f"trials reeval {name}"):
        check_checkpoints({t.key: checkpoints[t.key] for t in todo}, bound, spec.wl)  # before Ray starts
        say(f"{name}: re-evaluating {len(todo)} trial(s) with {_what(spec.wl, counts)} "
            f"({len(finished) - len(todo)} already done)")
        started = cluster.init_ray(address)
        try:
            res = {"num_cpus": spec.resources.get("cpu", 1), "num_gpus": spec.resources.get("gpu", 0)}
            pending = {reeval_task.options(**res).remote(spec.wl, bound[t.key].to_dict(), checkpoints[t.key],
                                                         asks[t.key]): t for t in todo}
            done, refused = 0, []
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                t = pending.pop(ready[0])
                metrics, files = _result(ready[0], t.run_name)
                metrics, problem = plain_numbers(metrics, spec.responses)
                if problem:  # nothing recorded: the run keeps its evaluation and is asked again next time
                    refused.append(f"{t.run_name}: {problem}")
                    say(f"{name}: {t.run_name}: nothing recorded, {problem}")
                    continue
                _log_evaluation(client, runs[t.key], root / name, metrics, files, asks[t.key])
                keep_parent_registry(client, runs[t.key].data.tags[PARENT_TAG], spec.wl.registry, metrics)
                done += 1
                say(f"{name}: {done}/{len(todo)} {t.run_name}: " + ", ".join(
                    f"{k} {metrics[k]:.4f}" for k in spec.wl.registry.headline() if k in metrics))
        finally:
            if started:
                ray.shutdown()
    return {"done": done, "skipped": len(finished) - len(todo), "refused": refused}


def _result(ref, run: str) -> tuple[dict, dict]:
    """A re-evaluation's (metrics, files); the workload's own error in one line naming the run."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        cause = e.cause if getattr(e, "cause", None) is not None else e
        said = " ".join(str(cause).split())[:300] or "(no message)"
        raise ValueError(f"reeval: {run}: the workload's reevaluate raised {type(cause).__name__}: {said}") from None


def plain_numbers(metrics, primary=()) -> tuple[dict, str | None]:
    """A re-evaluation's metrics as plain numbers (a numpy number or 0-d tensor is one), and
    why they cannot be recorded, or None: not a mapping of names to numbers, or a primary
    response (`primary`) among them that is not finite. A run is tagged with its new counts
    only beside values that are; a NaN elsewhere (a metric degenerate in this evaluation)
    is left out of the store, as a trial's is."""
    if not isinstance(metrics, dict) or not metrics:
        return {}, f"reevaluate returned {str(metrics)[:60]!r}, not a mapping of metric names to numbers"
    out = {}
    for k, v in metrics.items():
        got = plain_number(v)
        if got is None or (k in primary and not math.isfinite(got)):
            return {}, f"{k} = {str(v)[:60]!r} is not a {'finite ' if k in primary else ''}number"
        out[k] = got
    return out, None


def check_checkpoints(checkpoints: dict[str, str], configs: dict, wl, command: str = "reeval") -> None:
    """Every checkpoint a pass will load, checked here first by the workload
    (`finished_problem`): one line naming the first that cannot be loaded, or is not a
    finished trial's, before Ray starts (a Ray task's failure comes back as its traceback)."""
    for key, ckpt in checkpoints.items():
        problem = wl.finished_problem(ckpt, configs[key])
        if problem:
            raise ValueError(f"{command}: trial {key}: {problem}")


def _asked(tags: dict, counts: dict[str, int]) -> dict[str, int]:
    """The counts a run still needs: one it is already tagged with is done."""
    return {field: n for field, n in counts.items() if tags.get(reeval_tag(field)) != str(n)}


def _what(wl, counts: dict[str, int]) -> str:
    return " and ".join(f"{n} {wl.reeval_counts[field]}" for field, n in counts.items())


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


def next_step(client, run) -> int:
    """The step after a run's last point of any metric (an evaluation, a re-evaluation, a
    timing pass): where a new one goes, so the analysis (which reads each metric's latest
    value) reads it. Read afresh: another command may have logged since `run` was read."""
    run = client.get_run(run.info.run_id)
    latest = getattr(run.data, "_metric_objs", None)  # each metric's latest point, with its step
    if latest is not None and len(latest) == len(run.data.metrics):
        return 1 + max((m.step for m in latest), default=0)
    return 1 + max((m.step for key in run.data.metrics  # a client without them: every history
                    for m in client.get_metric_history(run.info.run_id, key)), default=0)


def _log_evaluation(client, run, exp_dir: Path, metrics: dict, files: dict[str, bytes],
                    counts: dict[str, int]) -> None:
    """The new evaluation as the run's next step, its files under `eval/`, and last the tags
    that mark the trial done (so an interrupted reeval redoes exactly the trials without
    them). Kept in storage first (`trials.store.kept`): a record the store lacks is replayed
    by `trials recover`, while one the store alone held was lost with it."""
    step = next_step(client, run)
    files = {f"eval/{name}": data for name, data in files.items()}
    tags = {reeval_tag(field): str(n) for field, n in counts.items()}
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
    found = shared_artifacts.addresses(spec)
    paths = shared_artifacts.in_storage(spec, root, found)
    for h in shared_artifacts.needed(spec, found):
        if h not in paths:
            raise ValueError(f"{command}: the shared target {h} is gone from {spec.wl.shared.file(root, h).parent}; "
                             f"{command} never trains one")
    return {t.key: t.config for t in shared_artifacts.bound(spec, found, paths)[0].trials}
