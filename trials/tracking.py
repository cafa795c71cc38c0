"""MLflow tracking of a sweep, written by the driver alone (a SQLite store takes one writer).

One experiment per sweep; a parent run for the sweep; one child run per trial
(`mlflow.parentRunId`), named by cell and replicate, found again by its `trial_key` tag
when a trial or the sweep resumes, so no run is ever duplicated. `SweepTracker` is a Ray
Tune callback: it runs in the driver and turns trial events into MLflow writes.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
from pathlib import Path
from typing import Any

from mlflow.entities import Param
from ray.tune import Callback

from dspark.record import (ARM_TAG, DESCRIPTION_TAG, DESIGN_PARAM, DONE_KEY, EXPERIMENT_KIND_TAG, FACTORS_PARAM,
                           MODEL_TRAINING, PARENT_TAG, PRIMARY_TERMS_TAG, RESPONSES_TAG, RUNS_VIEW_TAG, SEQUENTIAL_TAG,
                           STORE_RETRY_S, SWEEP_PARENT_TAG,
                           TRIAL_KEY_TAG, is_metric, metric_name, retrying, runs_view, sweep_parent, sweep_trials,
                           tracking_client)
from dspark.track import config_params, finite, git_commit, log_metrics, log_params, log_run_files, source_tags

from .spec import SweepSpec, Trial, columns

def trial_tags(spec: SweepSpec, trial: Trial, parent_id: str, extra: dict[str, str]) -> dict[str, str]:
    tags = {PARENT_TAG: parent_id, "sweep": spec.name, "mlflow.runName": trial.run_name, **trial.tags}
    tags.update(extra)
    tags.update(source_tags("trials run", extra.get("git_commit")))
    return tags


class Ledger:
    """Experiment, parent run and child runs of one sweep in one MLflow store."""

    def __init__(self, tracking_uri: str, spec: SweepSpec, identity: dict[str, str] | None = None):
        self.uri = tracking_uri
        self.spec = spec
        self.identity = dict(identity or {})  # the parent's record of the sweep (`trials.identity`)
        self.client = tracking_client(tracking_uri)
        exp = self.client.get_experiment_by_name(spec.name)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(spec.name)
        if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            # MLflow 3 opens an experiment of this kind in its model-training (runs) view,
            # not the GenAI "Overview / Traces" page
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        # the sweep's runs view (the link `trials run` prints opens it): written each time, as a
        # resume may restate the primary responses
        shown = columns(spec, limit=6)
        self.client.set_experiment_tag(self.experiment_id, RUNS_VIEW_TAG, runs_view(
            list(spec.factors), shown, (ARM_TAG,) if spec.controls else ()))
        if spec.description and (exp is None or not exp.tags.get("mlflow.note.content")):
            # the experiment's description in the MLflow UI: which question the sweep answers
            self.client.set_experiment_tag(self.experiment_id, "mlflow.note.content", spec.description[:4000])
        self.parent_id = self._parent()

    def _parent(self) -> str:
        parent = sweep_parent(self.client, self.experiment_id)
        if parent is not None:
            self.client.set_tag(parent.info.run_id, RESPONSES_TAG, json.dumps(self.spec.responses))
            if self.spec.sequential and SEQUENTIAL_TAG not in parent.data.tags:
                self.client.set_tag(parent.info.run_id, SEQUENTIAL_TAG, self.declared_plan())
            for k, v in self.identity.items():  # checked before any work: a parent made before them, or moved storage
                if parent.data.tags.get(k) != v:
                    self.client.set_tag(parent.info.run_id, k, v)
            return parent.info.run_id
        run = self.client.create_run(self.experiment_id, run_name=f"sweep {self.spec.name}",
                                     tags={SWEEP_PARENT_TAG: "true", "sweep": self.spec.name,
                                           DESIGN_PARAM: self.spec.design, "git_commit": git_commit(),
                                           **source_tags("trials run"),
                                           FACTORS_PARAM: ",".join(self.spec.factors), **self.identity,
                                           # the primary responses and margins (a tag: a resume may restate them)
                                           RESPONSES_TAG: json.dumps(self.spec.responses),
                                           PRIMARY_TERMS_TAG: json.dumps(self.spec.primary_terms),
                                           # the sequential plan, before any look can happen
                                           **({SEQUENTIAL_TAG: self.declared_plan()} if self.spec.sequential else {}),
                                           DESCRIPTION_TAG: self.spec.description[:4000],
                                           # MLflow shows this tag as the run's description
                                           "mlflow.note.content": self.spec.description[:4000]})
        self.client.log_batch(run.info.run_id, params=[
            Param(DESIGN_PARAM, self.spec.design), Param("replicates", str(self.spec.replicates)),
            # level order matters: the analysis reads it back as each factor's order
            Param(FACTORS_PARAM, json.dumps(self.spec.factors, default=str)[:6000]),
            Param("base", json.dumps(self.spec.base, sort_keys=True, default=str)[:6000])])
        return run.info.run_id

    def declared_plan(self) -> str:
        """The spec's sequential plan as `analysis.sequential.Plan` reads it, with no look yet."""
        return json.dumps({"declared": True, **self.spec.sequential, "looks": []})

    def claim(self) -> None:
        """Mark the parent RUNNING under this driver (host, pid and process start time), so
        that `status` and `resume` can tell a sweep whose driver died (kill -9) from one
        still running."""
        import socket

        import psutil

        me = psutil.Process()
        self.client.update_run(self.parent_id, status="RUNNING")
        for k, v in (("driver_host", socket.gethostname()), ("driver_pid", str(me.pid)),
                     ("driver_started", f"{me.create_time():.3f}")):
            self.client.set_tag(self.parent_id, k, v)

    def child_runs(self) -> dict[str, Any]:
        """trial_key -> run, for this sweep's trials."""
        return {r.data.tags.get(TRIAL_KEY_TAG): r for r in sweep_trials(self.client, self.experiment_id)}

    def open_child(self, trial: Trial, extra_tags: dict[str, str]) -> tuple[str, bool]:
        """The run of a trial: reused when it exists (resume), else created. The flag says
        the run had already FINISHED (Tune may replay a trial whose end it had not yet
        saved; its finished run is left as it is)."""
        existing = self.child_runs().get(trial.key)
        if existing is not None and existing.info.status == "FINISHED":
            return existing.info.run_id, True
        if existing is not None:
            run_id = existing.info.run_id
            self.client.update_run(run_id, status="RUNNING")
            self.client.set_tag(run_id, "resumed", str(int(existing.data.tags.get("resumed", "0")) + 1))
            return run_id, False
        tags = trial_tags(self.spec, trial, self.parent_id, extra_tags)
        run = self.client.create_run(self.experiment_id, run_name=trial.run_name, tags=tags)
        log_params(self.client, run.info.run_id, config_params(trial.config.to_dict()))
        return run.info.run_id, False

    def last_steps(self, run_id: str) -> dict[str, int]:
        """metric (the trainer's name) -> the last step this run logged it at."""
        run = self.client.get_run(run_id)
        out = {}
        for stored in run.data.metrics:
            history = self.client.get_metric_history(run_id, stored)
            if history:
                out[metric_name(stored)] = max(m.step for m in history)
        return out

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        log_metrics(self.client, run_id, metrics, step)

    def finish(self, run_id: str, status: str, error: str | None = None) -> None:
        if error:
            self.client.set_tag(run_id, "error", error[-4900:])
        self.client.set_terminated(run_id, status=status)

    def close_open_runs(self, status: str = "KILLED") -> int:
        """End every child still RUNNING (an interrupted sweep); returns how many."""
        n = 0
        for run in self.child_runs().values():
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, status=status)
                n += 1
        return n


def _retried(method):
    """Retry the callback's store writes for the tracker's window (a store briefly down or
    locked). Past the window StoreUnavailable stops the sweep; what was not written is in
    Tune's result files, which `trials resume` replays."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        return retrying(lambda: method(self, *args, **kwargs), self.retry_s, what=f"MLflow write ({method.__name__})")

    return wrapper


class SweepTracker(Callback):
    """Ray Tune callback (driver side) writing each trial's life into MLflow."""

    def __init__(self, tracking_uri: str, spec: SweepSpec, tags_by_key: dict[str, dict[str, str]],
                 retry_s: float = STORE_RETRY_S):
        self.tracking_uri = tracking_uri
        self.retry_s = retry_s
        self.spec = spec
        self.tags_by_key = dict(tags_by_key)  # trial_key -> its own tags (target hash, corpus hash, commit)
        self._ledger: Ledger | None = None
        self._runs: dict[str, str] = {}
        self._nodes: dict[str, str] = {}
        self._done: set[str] = set()
        self._last_step: dict[str, dict[str, int]] = {}  # run -> metric -> last step logged

    def __getstate__(self):  # Tune pickles callbacks with the experiment; the client is rebuilt
        state = dict(self.__dict__)
        state["_ledger"] = None
        state["_runs"] = {}
        state["_nodes"] = {}
        state["_done"] = set()
        state["_last_step"] = {}
        return state

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self._ledger = Ledger(self.tracking_uri, self.spec)
        return self._ledger

    def _trial(self, trial) -> Trial:
        return self.spec.trial_for(trial.config)  # the config is the trial's point: its levels

    def _run_id(self, trial) -> str:
        if trial.trial_id not in self._runs:
            t = self._trial(trial)
            run_id, done = self.ledger.open_child(t, self.tags_by_key.get(t.key, {}))
            self._runs[trial.trial_id] = run_id
            if done:
                self._done.add(run_id)
            elif run_id not in self._last_step:
                self._last_step[run_id] = self.ledger.last_steps(run_id)
        return self._runs[trial.trial_id]

    def _writable(self, trial) -> str | None:
        run_id = self._run_id(trial)
        return None if run_id in self._done else run_id

    @_retried
    def on_trial_start(self, iteration, trials, trial, **info):
        self._run_id(trial)

    @_retried
    def on_trial_restore(self, iteration, trials, trial, **info):
        self._run_id(trial)

    @_retried
    def on_trial_result(self, iteration, trials, trial, result, **info):
        persist_results(trial)  # the results before this one (Tune's own writer comes after this callback)
        run_id = self._writable(trial)
        if run_id is None:
            return
        step = int(result.get("step", 0))
        last = self._last_step.setdefault(run_id, {})
        # a metric is logged once per step: a trial resumed from a checkpoint older than
        # what was logged, or a final report repeating the last evaluation, adds nothing
        # (NaN is Tune's "not measured yet", see trials.trainable.TABLE_METRICS: never logged)
        metrics = {k: v for k, v in result.items()
                   if is_metric(k) and finite(v) and step > last.get(k, -1)}
        self.ledger.log_metrics(run_id, metrics, step)
        last.update({k: step for k in metrics})
        node = result.get("node_id")
        if node and self._nodes.get(run_id) != node:
            self._nodes[run_id] = node
            nodes = self.ledger.client.get_run(run_id).data.tags.get("ray_nodes", "")
            if node not in nodes.split(","):
                self.ledger.client.set_tag(run_id, "ray_nodes", ",".join(p for p in (nodes, node) if p))

    @_retried
    def on_trial_recover(self, iteration, trials, trial, **info):
        _stop_if_storage_full(trial)
        run_id = self._writable(trial)
        if run_id is None:
            return
        client = self.ledger.client
        restarts = int(client.get_run(run_id).data.tags.get("restarts", "0")) + 1
        client.set_tag(run_id, "restarts", str(restarts))

    @_retried
    def on_trial_complete(self, iteration, trials, trial, **info):
        persist_results(trial)
        run_id = self._writable(trial)
        if run_id is None:
            return
        last = {k: v for k, v in (trial.last_result or {}).items() if is_metric(k) and finite(v)}
        if not last.get(DONE_KEY):  # never FINISHED without its final metrics
            self.ledger.finish(run_id, "FAILED", "the trial ended without reporting its final metrics")
            self._runs.pop(trial.trial_id, None)
            return
        t = self._trial(trial)
        client = self.ledger.client
        ckpt = trial.checkpoint
        plots = Path(ckpt.path) / "artifacts" if ckpt is not None and ckpt.path else None
        log_run_files(client, run_id, t.config.to_dict(), last, plots)
        self.ledger.finish(run_id, "FINISHED")
        self._runs.pop(trial.trial_id, None)

    @_retried
    def on_trial_error(self, iteration, trials, trial, **info):
        _stop_if_storage_full(trial)
        persist_results(trial)
        run_id = self._writable(trial)
        if run_id is None:
            return
        self.ledger.finish(run_id, "FAILED", _trial_error(trial) or "trial failed")
        self._runs.pop(trial.trial_id, None)


def persist_results(trial) -> None:
    """Copy the trial's result file from the driver's staging folder into storage now.

    Tune writes `result.json` under /tmp/ray/session_*/.../driver_artifacts and copies it to
    storage only every so often (its experiment checkpoints): a driver killed with SIGKILL
    right after a trial ended left a FINISHED run whose last points storage lacked, so
    `trials recover` would have rebuilt it as unfinished. Done at each result and before a
    run is marked FINISHED or FAILED, storage holds every point of every closed run and all
    but the latest of a running one."""
    storage = getattr(trial, "storage", None)
    if storage is None:
        return
    try:
        src = Path(storage.trial_driver_staging_path) / "result.json"
        dst = Path(storage.trial_fs_path) / "result.json"
    except (RuntimeError, AttributeError):
        return  # no trial folder yet
    if not src.is_file() or src == dst:
        return
    from pyarrow.fs import LocalFileSystem, copy_files

    try:
        if isinstance(storage.storage_filesystem, LocalFileSystem):
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".result.json.{os.getpid()}.tmp")
            try:
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)  # a kill mid-copy leaves the older whole file, never half of one
            finally:
                tmp.unlink(missing_ok=True)
        else:
            copy_files(str(src), dst.as_posix(), source_filesystem=LocalFileSystem(),
                       destination_filesystem=storage.storage_filesystem)
    except OSError as e:
        if is_storage_full(e):
            raise StorageFull(f"storage {Path(storage.trial_fs_path).parent.parent} is full ({e.strerror or e})") from None
        raise


class StorageFull(RuntimeError):
    """The sweep's storage has no room left (ENOSPC): the sweep stops, resumable once there is."""


def is_storage_full(error: BaseException | str) -> bool:
    """An ENOSPC, raised here or in a trial (Tune hands the driver the trial's error text)."""
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(error) or "[Errno 28]" in str(error)


def _trial_error(trial) -> str:
    error = getattr(trial, "error_msg", None) or ""
    path = getattr(trial, "error_file", None)
    if not error and path and os.path.isfile(path):
        error = Path(path).read_text(errors="replace")
    return error


def _stop_if_storage_full(trial) -> None:
    """A trial that failed for want of room: stop the sweep now rather than let every trial
    fail the same way (its run is closed KILLED, so `trials resume` reruns it)."""
    error = _trial_error(trial)
    if is_storage_full(error):
        where = getattr(getattr(trial, "storage", None), "experiment_fs_path", None) or "storage"
        raise StorageFull(f"storage {Path(where).parent} is full: a trial could not write its checkpoint "
                          "(No space left on device)")
