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

from trials.store.client import STORE_RETRY_S, retrying, tracking_client
from trials.store.keys import (ARM_TAG, BASE_PARAM, DESCRIPTION_TAG, DESIGN_PARAM, DONE_KEY, DRIVER_HOST_TAG,
                               DRIVER_PID_TAG, DRIVER_STARTED_TAG, ERROR_TAG, EXPERIMENT_KIND_TAG, FACTORS_PARAM,
                               GIT_COMMIT_TAG, MODEL_TRAINING, NODE_KEY, NOTE_TAG, PARENT_TAG, PRIMARY_TERMS_TAG,
                               RAY_NODES_TAG, REPLICATES_PARAM, RESPONSES_TAG, RESTARTS_TAG, RESUMED_TAG,
                               SEQUENTIAL_TAG, SWEEP_PARENT_TAG, SWEEP_TAG, TRIAL_KEY_TAG, WORKLOAD_TAG, is_metric,
                               metric_name, sweep_parent, sweep_trials)
from trials.store.ui import RUNS_VIEW_TAG, runs_view
from trials.store.runs import config_params, finite, git_commit, log_metrics, log_params, log_run_files, source_tags

from .layout import persist_results
from trials.expand import columns
from trials.spec import SweepSpec, Trial

def trial_tags(spec: SweepSpec, trial: Trial, parent_id: str, extra: dict[str, str]) -> dict[str, str]:
    tags = {PARENT_TAG: parent_id, SWEEP_TAG: spec.name, "mlflow.runName": trial.run_name, **trial.tags}
    tags.update(extra)
    tags.update(source_tags("trials run", extra.get(GIT_COMMIT_TAG)))
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
        if spec.description and (exp is None or not exp.tags.get(NOTE_TAG)):
            # the experiment's description in the MLflow UI: which question the sweep answers
            self.client.set_experiment_tag(self.experiment_id, NOTE_TAG, spec.description[:4000])
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
                                     tags={SWEEP_PARENT_TAG: "true", SWEEP_TAG: self.spec.name, WORKLOAD_TAG: self.spec.workload,
                                           DESIGN_PARAM: self.spec.design, GIT_COMMIT_TAG: git_commit(),
                                           **source_tags("trials run"),
                                           FACTORS_PARAM: ",".join(self.spec.factors), **self.identity,
                                           # the primary responses and margins (a tag: a resume may restate them)
                                           RESPONSES_TAG: json.dumps(self.spec.responses),
                                           PRIMARY_TERMS_TAG: json.dumps(self.spec.primary_terms),
                                           # the sequential plan, before any look can happen
                                           **({SEQUENTIAL_TAG: self.declared_plan()} if self.spec.sequential else {}),
                                           DESCRIPTION_TAG: self.spec.description[:4000],
                                           # MLflow shows this tag as the run's description
                                           NOTE_TAG: self.spec.description[:4000]})
        self.client.log_batch(run.info.run_id, params=[
            Param(DESIGN_PARAM, self.spec.design), Param(REPLICATES_PARAM, str(self.spec.replicates)),
            # level order matters: the analysis reads it back as each factor's order
            Param(FACTORS_PARAM, json.dumps(self.spec.factors, default=str)[:6000]),
            Param(BASE_PARAM, json.dumps(self.spec.base, sort_keys=True, default=str)[:6000])])
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
        for k, v in ((DRIVER_HOST_TAG, socket.gethostname()), (DRIVER_PID_TAG, str(me.pid)),
                     (DRIVER_STARTED_TAG, f"{me.create_time():.3f}")):
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
            self.client.set_tag(run_id, RESUMED_TAG, str(int(existing.data.tags.get(RESUMED_TAG, "0")) + 1))
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
            self.client.set_tag(run_id, ERROR_TAG, error[-4900:])
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
        _persist(trial)  # the results before this one (Tune's own writer comes after this callback)
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
        node = result.get(NODE_KEY)
        if node and self._nodes.get(run_id) != node:
            self._nodes[run_id] = node
            nodes = self.ledger.client.get_run(run_id).data.tags.get(RAY_NODES_TAG, "")
            if node not in nodes.split(","):
                self.ledger.client.set_tag(run_id, RAY_NODES_TAG, ",".join(p for p in (nodes, node) if p))

    @_retried
    def on_trial_recover(self, iteration, trials, trial, **info):
        _stop_if_storage_full(trial)
        run_id = self._writable(trial)
        if run_id is None:
            return
        client = self.ledger.client
        restarts = int(client.get_run(run_id).data.tags.get(RESTARTS_TAG, "0")) + 1
        client.set_tag(run_id, RESTARTS_TAG, str(restarts))

    @_retried
    def on_trial_complete(self, iteration, trials, trial, **info):
        _persist(trial)
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
        _persist(trial)
        run_id = self._writable(trial)
        if run_id is None:
            return
        self.ledger.finish(run_id, "FAILED", _trial_error(trial) or "trial failed")
        self._runs.pop(trial.trial_id, None)


def _persist(trial) -> None:
    persist_results(trial, _raise_if_full)


def _raise_if_full(e: OSError, root: Path) -> None:
    if is_storage_full(e):
        raise StorageFull(f"storage {root} is full ({e.strerror or e})") from None


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
