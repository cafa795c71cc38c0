"""Run a sweep on Ray Tune: the shared target first (a Ray task), then one trial per
cell x replicate, each calling the workload's `train` and reporting through `ray.tune.report`.

Layout under the storage path: `<storage>/<sweep>/` is Tune's experiment directory (with
`spec.yaml` and `sweep.json` beside it for `resume` and `status`), `<storage>/targets/`
holds the content-addressed shared targets.
"""

from __future__ import annotations

import json
import os
import signal
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.search.basic_variant import BasicVariantGenerator

from trials.store.client import retrying, tracking_client
from trials.store.kept import write_atomic
from trials.store.probe import probe_store

from . import spec as specmod
from trials.driver.failfast import FailFast
from trials.driver.cluster import check_gcs_reachable, check_local_resources, check_resources, init_ray, kill_local_ray
from trials.driver.identity import check_same_sweep, claim, identity_tags
from .lease import Lease, check_storage, reap_dead_driver
from trials.driver.progress import ProgressLines, clock, failure_lines, quiet_slow_warnings
from trials import layout
from trials.driver import shared_artifacts
from .recover import missing_records, replay
from .run_settings import RunSettings
from .saved import save_sweep_files, saved_spec, storage_root
from trials.spec import SweepSpec
from .trainable import shared_target_task, trainable
from trials.driver.stopping import Interrupted, Signals, best_effort, raise_stopped
from .tracking import SweepTracker, open_ledger
from trials.store.keys import ERROR_TAG, GIT_COMMIT_TAG, SHARED_PREFIX
from trials.driver.ledger import Ledger
from trials.store.runs import git_commit

def bind_targets(spec: SweepSpec, storage: Path, cpus: int | None = None,
                 addresses: dict[str, tuple[str, dict[str, str]]] | None = None
                 ) -> tuple[SweepSpec, dict[str, dict[str, str]], dict[str, dict]]:
    """Address every trial's shared artifact (or take `addresses`, `shared_artifacts.addresses(spec)`),
    train those that storage lacks, and point each trial that uses one at its file.
    Returns a new spec (the one given is left as it is), each trial's tags (DSpark:
    `target_hash`, `data_sha256`) and the shared artifacts by hash."""
    found = addresses if addresses is not None else shared_artifacts.addresses(spec)
    made = ensure_targets(spec.wl, shared_artifacts.needed(spec, found), storage, spec.resources, cpus)
    spec, tags = shared_artifacts.bound(spec, found, {h: meta["path"] for h, meta in made.items()})
    return spec, tags, made


def ensure_targets(wl, needed: dict[str, Any], storage: Path, resources: dict[str, float],
                   cpus: int | None = None) -> dict[str, dict]:
    """artifact hash -> metadata with its `path`, for each config in `needed`: reused from
    storage, else trained once as a Ray task (all of them in parallel)."""
    art = wl.shared
    out: dict[str, dict] = {}
    pending = {}
    for h, cfg in needed.items():
        path = art.file(storage, h)
        if path.is_file():
            meta = art.read(path)
            out[h] = {**meta, "path": str(path), "reused": True}
            continue
        # nothing else runs while the shared targets train: a local sweep gives them every
        # core (docs/performance.md has what one target costs)
        n_cpu = max(resources.get("cpu", 1), (cpus or 0) // max(1, len(needed)))
        opts = {"num_cpus": n_cpu, "num_gpus": resources.get("gpu", 0)}
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"shared target {h}: training {art.describe(cfg)} on {n_cpu} core(s) "
              "(once; every trial of this target reuses it)", flush=True)
        progress = path.with_name(f".{path.name}.progress.json")
        progress.unlink(missing_ok=True)
        pending[h] = (path, shared_target_task.options(**opts).remote(wl, cfg.to_dict(), str(path), str(progress)),
                      time.monotonic())
    for h, (path, ref, t0) in pending.items():
        meta = _await_target(h, ref, path.with_name(f".{path.name}.progress.json"), t0)
        print(f"shared target {h}: trained in {time.monotonic() - t0:.0f} s{_measured(meta)}", flush=True)
        if meta.get("target_hash", h) != h:
            raise RuntimeError(f"shared target {h}: the task trained {meta['target_hash']}")
        out[h] = {**meta, "path": str(path), "reused": False}
    return out


def _measured(meta: dict) -> str:
    """", <metric> <value>" for each metric a shared artifact's metadata or progress holds."""
    return "".join(f", {k} {v:.4f}" for k, v in meta.items()
                   if "/" in k and isinstance(v, float) and not isinstance(v, bool))


TARGET_PROGRESS_S = 30.0  # how often the driver says where a shared target's training is


def _await_target(h: str, ref, progress: Path, t0: float) -> dict:
    """The shared target's metadata once its task ends; meanwhile, every TARGET_PROGRESS_S s,
    one line with the step its last evaluation reached, the time so far and the time left
    at that pace (a small target trains for minutes: no silence between start and end)."""
    shown = -1
    while True:
        done, _ = ray.wait([ref], timeout=TARGET_PROGRESS_S)
        if done:
            progress.unlink(missing_ok=True)
            return ray.get(ref)
        try:
            p = json.loads(progress.read_text())
        except (OSError, ValueError):  # no evaluation yet, or being replaced
            continue
        if p["step"] > shown:
            shown, spent = p["step"], time.monotonic() - t0
            left = spent * (p["of"] - p["step"]) / max(p["step"], 1)
            print(f"shared target {h}: step {p['step']}/{p['of']}{_measured(p)}, "
                  f"{clock(spent)} elapsed, ~{clock(left)} left", flush=True)


def search_space(spec: SweepSpec, trials) -> tuple[dict, list[dict]]:
    """Tune's view of the sweep: one `grid_search` dimension per factor, the replicate and
    (with controls) the arm, so that Tune's table and results hold a column for each; and
    the trials to run, in run order, as points of that grid.

    The points are what Tune runs (`BasicVariantGenerator(points_to_evaluate=...)` with
    `num_samples` = their number): a fractional design or a resume runs only its rows, and
    every design keeps its randomised run order, which a plain grid's nested loops would
    lose.
    """
    points = [spec.tune_params(t) for t in trials]
    order = {f: list(levels) + [""] for f, levels in spec.factors.items()}
    space = {}
    for k in points[0]:
        values = list(dict.fromkeys(p[k] for p in points))
        if k in order:
            values.sort(key=order[k].index)
        elif k == "replicate":
            values.sort()
        space[k] = tune.grid_search(values)
    return space, points


def _dirname_creator(spec: SweepSpec):
    def dirname(trial) -> str:
        return layout.trial_dirname(trial.trial_id, spec.trial_for(trial.config).key)

    return dirname


def run(spec: SweepSpec, settings: RunSettings | None = None, **given) -> dict:
    """Run (or resume) a validated sweep, as its one driver (`trials.lease`).

    Args:
        spec: the sweep, as `trials.validate.load_spec` made it (its workload loaded).
        settings: the rest (`trials.run_settings.RunSettings`), with `given` (any of its
            fields, by the keyword names below) put over it. Its fields:
        tracking_uri: the MLflow store every trial is a run of.
        storage: Tune's storage root (shared on a cluster); None: `ray_results`.
        address: a Ray cluster (`auto` or HOST:PORT); None: a local Ray of this sweep's own.
        max_concurrent: trials at once (None: the spec's).
        resume: continue the sweep in storage, rerunning nothing finished.
        verbose: 0 quiet, 1 a line per finished trial, 2 Tune's own output.
        resource_wait_s: on a cluster, how long to wait for a node that can hold a trial.
        extend: the spec may add replicate blocks to the sweep in storage (`trials augment`).
        store_timeout_s: how long the store has to answer before any work.
        store_retry_s: how long a failing store write is retried before the sweep stops cleanly.
        callbacks: more Tune callbacks, after the tracker (a benchmark's stopwatch).
        command: what the lease records as this driver's command (None: `trials run` or
            `trials resume`), which a driver refused meanwhile names.
        leased: called with the sweep's folder once the lease is held, before its files are
            saved (augment records its target there).

    Returns:
        A summary: the trials' states, the experiment and parent run, the storage, and
        Tune's results of the trials run now.

    Example:
        >>> spec = trials.validate.load_spec("sweeps/demo.yaml")      # doctest: +SKIP
        >>> run(spec, tracking_uri="sqlite:///mlflow.db")["finished"]  # doctest: +SKIP
        16
    """
    settings = replace(settings or RunSettings(), **given)
    root = storage_root(settings.storage)
    exp_dir = root / spec.name
    command, uri = settings.command, settings.tracking_uri
    _refuse_before_ray(spec, uri, root, settings.address, settings.store_timeout_s,
                       command.split()[1] if command else "resume" if settings.resume else "run")
    again, spec = _same_sweep_again(spec, root, exp_dir, settings.extend)  # the grown sweep, where one was augmented
    settings = replace(settings, resume=settings.resume | again)
    with Lease(exp_dir, spec.name, command or f"trials {'resume' if settings.resume else 'run'} {spec.name}"):
        if settings.resume:
            _refuse_missing_records(spec, exp_dir, uri)
        if settings.leased is not None:
            settings.leased(exp_dir)
        save_sweep_files(exp_dir, spec, uri, settings.max_concurrent)  # `status` and `resume` find it at once
        return _run_leased(spec, settings, root, exp_dir)


def _refuse_before_ray(spec: SweepSpec, tracking_uri: str, root: Path, address: str | None, store_timeout_s: float,
                       verb: str) -> None:
    """Before Ray starts, each refusal in one line: this machine or the cluster, the store,
    the sweep's name (one sweep per name per store, claimed in one atomic write that two
    drivers started together cannot both win), the storage."""
    if address is None and not ray.is_initialized():
        check_local_resources(spec)
    elif address and not ray.is_initialized():
        check_gcs_reachable(address)
    probe_store(tracking_uri, store_timeout_s, writable=True)
    check_same_sweep(spec, tracking_uri, root, verb)
    claim(spec, tracking_uri, root, verb)
    check_storage(root, max(spec.wl.checkpoint_bytes(t.config) for t in spec.trials))


def _refuse_missing_records(spec: SweepSpec, exp_dir: Path, tracking_uri: str) -> None:
    """Resuming where the store lost the sweep's records would rerun finished trials into
    empty runs: refuse, and name the command that rebuilds them."""
    missing = missing_records(spec, exp_dir, tracking_uri)
    if missing:
        raise ValueError(f"resume: the store {tracking_uri} has no record of {len(missing)} trial(s) that storage "
                         f"holds results for (e.g. {missing[0]}); rebuild them first with: trials recover "
                         f"{spec.name} --storage {exp_dir.parent} --tracking-uri {tracking_uri}")


def _run_leased(spec: SweepSpec, settings: RunSettings, root: Path, exp_dir: Path) -> dict:
    tracking_uri, address, resume = settings.tracking_uri, settings.address, settings.resume
    signals = Signals(local_ray=address is None and not ray.is_initialized())
    opened: dict[str, Ledger] = {}  # the ledger once it exists, for the cleanup below
    # Ray's start is mostly waiting for its processes: meanwhile hash the corpora (seconds
    # for a large one) and let a new SQLite store create its tables (seconds too)
    background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sweep-setup")
    addressing = background.submit(shared_artifacts.addresses, spec)
    warming = background.submit(_warm_store, tracking_uri)
    identity = identity_tags(spec, root)  # of the spec as saved: bound targets lie in this storage
    started_ray = init_ray(address)  # first: ray.init installs its own SIGTERM handler, which ours replaces
    try:
        with signals:
            check_resources(spec, autoscaling=address is not None, wait_s=settings.resource_wait_s)
            cpus = None if address else int(ray.cluster_resources().get("CPU", 1))
            spec, tags, made = bind_targets(spec, root, cpus, addressing.result())
            warming.result()
            ledger = opened["ledger"] = open_ledger(tracking_uri, spec, identity)
            tracker = _open_records(ledger, spec, tags, made, exp_dir, resume, settings.store_retry_s)
            todo, resume_dirs = _unfinished(spec, ledger, exp_dir) if resume else (spec.trials, {})
            fail = tracker.fail_fast = FailFast(spec, todo)
            results = _fit(spec, todo, resume_dirs, root, [tracker, fail], signals, settings,
                           stop=fail.stopper()) if todo else None
        states = retrying(lambda: _close(spec, ledger, signals, fail if todo else None), settings.store_retry_s,
                          what="closing the sweep's runs")
        return {**states, "experiment": spec.name, "tracking_uri": tracking_uri,
                "storage": str(exp_dir), "experiment_id": ledger.experiment_id, "parent_run_id": ledger.parent_id,
                "results": results}  # Tune's ResultGrid of the trials run now (None if none was left)
    except BaseException as e:
        raise_stopped(e, opened.get("ledger"), spec.name, tracking_uri, signals)
        raise
    finally:
        background.shutdown(wait=False)
        if "ledger" in opened:
            best_effort(lambda: opened["ledger"].close_open_runs("KILLED"))
        if started_ray:
            kill_local_ray() if signals.ray_lost else ray.shutdown()


def _open_records(ledger: Ledger, spec: SweepSpec, tags: dict, made: dict, exp_dir: Path, resume: bool,
                  store_retry_s: float) -> SweepTracker:
    """Claim the parent for this driver, note the shared targets, and on a resume replay the
    points the store missed (it was down, or the driver died between writes)."""
    reap_dead_driver(ledger.client, ledger.experiment_id)  # runs left RUNNING by a kill -9
    ledger.claim()
    layout.save_experiment(exp_dir, ledger.experiment_id, ledger.parent_id, write_atomic)
    for h, meta in made.items():
        ledger.client.set_tag(ledger.parent_id, f"{SHARED_PREFIX}{h}", meta["path"])
    commit = git_commit()
    tracker = SweepTracker(ledger.uri, spec, {k: {**v, GIT_COMMIT_TAG: commit} for k, v in tags.items()},
                           retry_s=store_retry_s)
    if resume:
        replay(ledger, tracker.tags_by_key, spec, exp_dir, close=False)
    return tracker


def _warm_store(tracking_uri: str) -> None:
    """Open the store once (MLflow creates a new SQLite store's tables on first use); any
    error is left for the Ledger to raise in the driver's thread."""
    try:
        tracking_client(tracking_uri).search_experiments(max_results=1)
    except Exception:
        pass


def _same_sweep_again(spec: SweepSpec, root: Path, exp_dir: Path, extend: bool = False) -> tuple[bool, SweepSpec]:
    """A sweep already in storage: the same design resumes (rerunning nothing finished);
    with `extend` so does one that only adds replicate blocks to it; the spec it grew from
    (`trials run` of the unchanged file after `trials augment`) resumes the grown sweep, all
    its blocks; another one under the same name is refused. Whether it resumes, and the spec
    that runs."""
    if not (exp_dir / "spec.yaml").is_file():
        return False, spec
    saved = saved_spec(exp_dir / "spec.yaml", "resume")
    if extend and specmod.extends(saved, spec):
        return True, spec
    if not extend and saved.replicates > spec.replicates and specmod.extends(spec, saved):
        print(f"{spec.name}: storage holds {saved.replicates} replicate blocks (trials augment added "
              f"{saved.replicates - spec.replicates} to the spec file's {spec.replicates}); continuing all "
              f"{saved.replicates}", flush=True)
        return True, saved
    if not specmod.same_design(saved, spec):
        raise specmod.SpecError([f"sweep {spec.name!r} already exists in {root} with a different spec: "
                                 f"rename the sweep, or delete {exp_dir}"])
    return True, spec


def _unfinished(spec: SweepSpec, ledger: Ledger, exp_dir: Path) -> tuple[list, dict[str, str]]:
    """The trials not FINISHED in the store, and each one's newest checkpoint.

    Resuming never unpickles Tune's experiment state (tuner.pkl, trainable.pkl and the rest
    could run code written there by anyone who can write the storage): the unfinished
    trials are rebuilt from the saved spec and the MLflow store, and each continues from its
    newest checkpoint, loaded with weights_only=True."""
    runs = ledger.child_runs()
    todo = [t for t in spec.trials if not (t.key in runs and runs[t.key].info.status == "FINISHED")]
    return todo, layout.latest_checkpoints(exp_dir, todo, spec.wl)


_AUTO_LOGGERS = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"


def _fit(spec: SweepSpec, todo, resume_dirs: dict[str, str], root: Path, callbacks: list[Callback],
         signals: "Signals", settings: RunSettings, stop=None):
    """Tune's run of the trials `todo`; `callbacks`, the sweep's own, come before the settings' ones."""
    verbose = settings.verbose
    limit = settings.max_concurrent if settings.max_concurrent is not None else spec.max_concurrent
    space, points = search_space(spec, todo)
    # verbose 1: a line per finished trial and a heartbeat (trials.driver.progress); 2: a line per
    # trial event; 3: Tune's own output as well (its box and tables, its INFO lines)
    shown = [ProgressLines(spec, len(todo), verbose=verbose, slots=limit)] if verbose >= 1 else []
    quiet = verbose < 3
    if quiet:  # Tune's new output engine prints its configuration box even when silent
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        logging.getLogger("ray.tune").setLevel(logging.WARNING)
        # "snapshotting triggered multiple times in 5 s": Tune's hint for trials that checkpoint
        # often, as a tiny sweep's do; nothing a sweep's user acts on
        logging.getLogger("ray.tune.execution.experiment_state").setLevel(logging.ERROR)
        quiet_slow_warnings()
    tuner = tune.Tuner(
        trainable(spec, resume_dirs),
        param_space=space,
        tune_config=tune.TuneConfig(
            num_samples=len(points), reuse_actors=True, trial_dirname_creator=_dirname_creator(spec),
            trial_name_creator=lambda trial: spec.trial_for(trial.config).run_name,
            search_alg=BasicVariantGenerator(points_to_evaluate=points, max_concurrent=limit or 0)),
        run_config=tune.RunConfig(
            name=spec.name, storage_path=str(root), verbose=0 if quiet else 2, stop=stop,
            # Tune's CSV and JSON result files (its ExperimentAnalysis reads them), but not its
            # TensorBoard logger, which MLflow replaces and whose import alone costs seconds
            callbacks=[*callbacks, *settings.callbacks, *shown, CSVLoggerCallback(), JsonLoggerCallback()],
            failure_config=tune.FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=4)),
    )
    signals.in_tune = True
    auto_loggers = os.environ.get(_AUTO_LOGGERS)
    os.environ[_AUTO_LOGGERS] = "1"  # read when fit() assembles its callbacks
    try:
        return tuner.fit()
    finally:
        signals.in_tune = False
        if auto_loggers is None:
            os.environ.pop(_AUTO_LOGGERS, None)
        else:
            os.environ[_AUTO_LOGGERS] = auto_loggers


def _close(spec: SweepSpec, ledger: Ledger, signals: "Signals", fail: FailFast | None = None) -> dict[str, int]:
    """End the parent run from the store's counts (a trial that Tune stopped on a signal
    ends neither FINISHED nor FAILED): KILLED and `Interrupted` when any trial is left; FAILED
    with the one cause where the sweep stopped early on it (`trials.driver.failfast`)."""
    runs = ledger.child_runs()
    ended = [runs[t.key].info.status if t.key in runs else "PENDING" for t in spec.trials]
    states = {"finished": ended.count("FINISHED"), "failed": ended.count("FAILED")}
    left = len(spec.trials) - states["finished"] - states["failed"]
    if fail is not None and fail.tripped and left and not signals.signum:
        ledger.close_open_runs("KILLED")
        line = fail.line(left)
        ledger.finish(ledger.parent_id, "FAILED", line)
        return {**states, "stopped_early": line}
    if states["finished"] + states["failed"] < len(spec.trials):
        ledger.close_open_runs("KILLED")
        ledger.finish(ledger.parent_id, "KILLED")
        raise Interrupted(signals.signum or signal.SIGINT)
    causes = "\n".join(failure_lines(spec, runs))  # each failed trial's cause, on the parent too
    if not causes and ERROR_TAG in ledger.client.get_run(ledger.parent_id).data.tags:
        ledger.client.delete_tag(ledger.parent_id, ERROR_TAG)  # a resume reran what had failed
    ledger.finish(ledger.parent_id, "FAILED" if states["failed"] else "FINISHED", causes or None)
    return states
