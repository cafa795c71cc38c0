"""What runs in a sweep's Ray workers: the trial function Tune calls and the task that
trains a shared target.

Kept apart from `trials.runner` so that a worker imports what a trial needs (the workload,
loaded by name; torch; Ray Tune) and not the driver's MLflow and tracking code: Tune unpickles the
trainable in every trial actor, which imports the module that defines it, and MLflow's
import alone costs seconds (docs/performance.md).
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ray
from ray import tune

from trials.store.keys import DONE_KEY, ERROR_KEY, NODE_KEY, TRAINER_ERROR_FILE, is_metric

ENGINE_PREFIX = "trial/"  # the engine's own metrics (trial/done, trial/import_s): never the trainer's

from .store.items import is_item_column
from .registry import plain_number, results_problem
from .workload_defaults import TrainContext


# Fault injection for the reliability tests, not a knob: a JSON object mapping trial keys
# to a head-stage step at which that trial raises, unless it resumed from a checkpoint.
# Read in the trial's worker, which inherits the environment of the driver that started Ray.
CRASH_ENV = "DSPARK_CRASH_AT_STEP"


class WorkerLost(RuntimeError):
    """A crash of the trial's process, as the reliability tests inject it: not the trainer's
    error, so Tune restarts the trial (from its checkpoint) as it does after a lost worker."""


def _injected_crash(trial_key: str):
    step = json.loads(os.environ.get(CRASH_ENV) or "{}").get(trial_key)
    if not step:
        return None

    def before_step(now: int, resumed: bool) -> None:
        if now == step and not resumed:
            raise WorkerLost(f"injected crash at step {now} ({CRASH_ENV}, test only)")

    return before_step


class TrialResultsError(RuntimeError):
    """A trial that ended without a usable value of a primary response (the run is FAILED)."""


@dataclass(frozen=True)
class ResultChecks:
    """What a trial's results are checked against, and the run that the refusals name."""
    responses: tuple[str, ...]
    is_timed: Callable[[str], bool]
    run: str


def trial_fn(wl, trial_key: str, cfg, cpus: int, resume_from: str | None, responses=(),
             run_name: str = "") -> None:
    """One training run of the workload inside Tune's trainable. Its results are checked when
    it ends: a primary response (`responses`) missing, not a number or not finite fails the
    trial, in one line naming the run and the metric."""
    import torch

    train = wl.train  # the workload the driver loaded, handed here with the trial (`Loaded.train`)
    # Tune's progress table shows the first four metrics of the first result it sees, so every
    # result leads with the registry's headline metrics, NaN until measured (the tracker logs
    # no NaN to MLflow)
    table = wl.registry.headline()
    is_timed = wl.registry.is_timed

    torch.set_num_threads(max(1, int(cpus)))
    out_dir = tempfile.mkdtemp(prefix=f"{wl.name}-trial-")
    cfg = cfg.replace(out_dir=out_dir)

    node = {NODE_KEY: ray.get_runtime_context().get_node_id()}

    last: dict = {}
    own: dict = {}  # what the trainer itself reported, latest values (no NaN leads)
    checks = ResultChecks(tuple(responses), is_timed, run_name or trial_key)
    report = _reporter(last, own, table, node, checks, wl.registry)

    try:
        _train(train, cfg, report, last, own, checks, resume_from, _injected_crash(trial_key))
    except (WorkerLost, ray.exceptions.RayError):
        raise  # the worker or the cluster, not the trainer: Tune restarts the trial (max_failures)
    except Exception as e:  # noqa: BLE001  the trainer's own error: the same again on a retry
        if _storage_full(e):
            raise  # the sweep's storage, not the trainer: the driver stops the sweep, resumable (trials.tracking)
        _failed(e, last)
    finally:
        # tune.report has already copied every checkpoint to the sweep's storage
        shutil.rmtree(out_dir, ignore_errors=True)


def _storage_full(e: BaseException) -> bool:
    """An ENOSPC anywhere in the error's chain (a checkpoint Tune could not write)."""
    for _ in range(20):  # a chain is short; a cyclic one ends here
        if e is None:
            return False
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "No space left on device" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _failed(e: Exception, last: dict) -> None:
    """End the trial on its trainer's error, once: its traceback in the trial's folder
    (TRAINER_ERROR_FILE), its type and message in the last result (ERROR_KEY), which the tracker
    turns into the run's FAILED status and one-line cause. Tune sees the trial end, so it is
    not retried: a retry would raise the same error, at the cost of another run."""
    import traceback

    text = "".join(traceback.format_exception(e))
    try:  # beside Tune's own records of the trial, in the sweep's storage (shared on a cluster)
        folder = Path(tune.get_context().get_storage().trial_fs_path)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / TRAINER_ERROR_FILE).write_text(text)
    except (OSError, TypeError, AttributeError):
        pass  # no folder to keep it in: the one-line cause still reaches the run
    message = " ".join(str(e).split()) or "(no message)"
    tune.report({**last, ERROR_KEY: f"{type(e).__name__}: {message}"[:1000]})


def _train(train, cfg, report, last: dict, own: dict, checks: ResultChecks, resume_from, hook) -> None:
    """The trainer's run, from Tune's checkpoint, a resume's or the start, then its results checked."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:  # Tune restarted this trial after a crash in this sweep
        with checkpoint.as_directory() as resume_dir:
            train(cfg, TrainContext(report, resume_dir, hook))
    else:  # `trials resume` gives the trial's last checkpoint in storage; a new trial none
        train(cfg, TrainContext(report, resume_from or None, hook))
    problem = results_problem(own, checks.responses, checks.is_timed)
    if problem and (own or not (checkpoint is not None or resume_from)):  # resumed from its end: reported then
        raise TrialResultsError(f"run {checks.run}: {problem}")
    # the trial's last word: its final metrics again with DONE_KEY, the mark that the run
    # ended (the tracker marks no run FINISHED without it, and `trials recover` reads it
    # from Tune's result files)
    tune.report({**last, DONE_KEY: 1.0})


def _reporter(last: dict, own: dict, table, node: dict, checks: ResultChecks, registry):
    """The `report(metrics, checkpoint_dir)` a trial's trainer calls: each result to Tune,
    led by the headline metrics (NaN until measured), a primary response that is no number
    refused at once (a NaN may wait: it must be finite when the trial ends), and a metric
    the workload's `metrics` does not declare refused at its first report, naming it (the
    store would keep it under no rule, the analysis could not read it)."""
    responses, is_timed, run = checks.responses, checks.is_timed, checks.run

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        metrics = {k: (_number(run, k, v) if is_metric(k) or k == "step" else v) for k, v in metrics.items()}
        unknown = sorted(k for k in metrics if is_metric(k) and not k.startswith(ENGINE_PREFIX)
                         and not is_item_column(k) and registry.lookup(k) is None)
        if unknown:
            raise TrialResultsError(f"run {run}: reported {', '.join(map(repr, unknown[:3]))}"
                                    f"{f' and {len(unknown) - 3} more' if len(unknown) > 3 else ''}, not among the "
                                    "workload's metrics: declare it in `metrics` or rename it")
        problem = results_problem(metrics, [r for r in responses if r in metrics], is_timed)
        if problem and "not a number" in problem:
            raise TrialResultsError(f"run {run}: {problem}")
        own.update(metrics)
        lead = {k: metrics.get(k, float("nan")) for k in table}
        metrics = {**lead, **metrics, **node}  # node: where the trial ran, for the run's tags
        last.update(metrics)
        if checkpoint_dir is None:
            tune.report(metrics)
        else:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(checkpoint_dir))
    return report


def _number(run: str, name: str, value):
    """A reported value as a plain Python number: a numpy number or a 0-d tensor or array is
    one (its `.item()`); anything else fails the trial at once, naming it, rather than vanish
    from the store (MLflow drops what it cannot log)."""
    if value is None:
        return math.nan  # not measured this time: NaN, which the store leaves out as it does Tune's leads
    got = plain_number(value)
    if got is not None:
        return got
    raise TrialResultsError(f"run {run}: reported {name} = {str(value)[:60]!r} ({type(value).__name__}), not a number "
                            "(a float or int, a numpy number, or a 0-d tensor)")


@ray.remote(max_retries=1)
def shared_target_task(wl, config: dict, path: str, progress_file: str | None = None) -> dict:
    """Train one of the sweep's shared artifacts (`Workload.shared`) in a Ray task."""
    import torch

    torch.set_num_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    return wl.shared.train(config, path, progress_file)


def trainable(spec, resume_dirs: dict[str, str]):
    """The function Tune runs: it resolves the point's levels to the trial's config."""
    res = {"cpu": spec.resources.get("cpu", 1), "gpu": spec.resources.get("gpu", 0)}

    def fn(params):
        t = spec.trial_for(params)
        trial_fn(spec.wl, t.key, t.config, res["cpu"], resume_dirs.get(t.key), tuple(spec.responses),
                 t.run_name)

    fn.__name__ = f"{spec.wl.name}_trial"
    return tune.with_resources(fn, res)
