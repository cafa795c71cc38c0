"""MLflow tracking of a sweep, written by the driver alone (a SQLite store takes one writer).

One experiment per sweep; a parent run for the sweep; one child run per trial
(`mlflow.parentRunId`), named by cell and replicate, found again by its `trial_key` tag
when a trial or the sweep resumes, so no run is ever duplicated. `SweepTracker` is a Ray
Tune callback: it runs in the driver and turns trial events into MLflow writes.
"""

from __future__ import annotations

import errno
import functools
import os
from pathlib import Path

from ray.tune import Callback

from trials.store.client import STORE_RETRY_S, one_http_attempt, retrying
from trials.store.keys import DONE_KEY, TRAINER_ERROR_FILE, ERROR_KEY, NODE_KEY, RAY_NODES_TAG, RESTARTS_TAG, is_metric
from trials.spec import Trial
from trials.driver.ledger import Ledger
from trials.store.runs import finite, log_run_files, loggable

from trials.expand import columns
from trials.spec import SweepSpec

from .layout import persist_results


def open_ledger(tracking_uri: str, spec: SweepSpec, identity: dict[str, str] | None = None) -> Ledger:
    """The sweep's records in its store (`trials.driver.ledger.Ledger`), its runs view showing
    the responses the engine shows for the sweep (`expand.columns`)."""
    return Ledger(tracking_uri, spec, identity, columns(spec, limit=6))


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
        self.fail_fast = None  # trials.driver.failfast.FailFast, where the driver stops early on one cause

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
            self._ledger = open_ledger(self.tracking_uri, self.spec)
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
            else:
                self._steps(run_id)
        return self._runs[trial.trial_id]

    def _steps(self, run_id: str) -> dict[str, int]:
        """metric -> the last step the store holds it at for this run (read once, then kept)."""
        if run_id not in self._last_step:
            self._last_step[run_id] = self.ledger.last_steps(run_id)
        return self._last_step[run_id]

    def _log_once(self, run_id: str, metrics: dict, step: int) -> None:
        """Write a report's points once: a write that failed may still have landed (the server
        committed it, then died before answering), so after any failure the steps are read
        from the store again before the callback's retry writes what is missing."""
        try:
            with one_http_attempt():
                self.ledger.log_metrics(run_id, metrics, step)
        except BaseException:
            self._last_step.pop(run_id, None)
            raise
        self._last_step[run_id].update({k: step for k in metrics})

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
        last = self._steps(run_id)
        # a metric is logged once per step: a trial resumed from a checkpoint older than
        # what was logged, or a final report repeating the last evaluation, adds nothing
        # (NaN is Tune's "not measured yet": never logged, but for an item's, `loggable`)
        metrics = loggable(result, step, last)
        self._log_once(run_id, metrics, step)
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
        raised = raised_error(trial)
        if raised:  # the trainer raised: the run FAILED with its cause, once (trials.trainable)
            self.ledger.finish(run_id, "FAILED", raised)
            self._runs.pop(trial.trial_id, None)
            return
        last = {k: v for k, v in (trial.last_result or {}).items() if is_metric(k) and finite(v)}
        if not last.get(DONE_KEY) and self.fail_fast is not None and self.fail_fast.tripped:
            self.ledger.finish(run_id, "KILLED")  # stopped early on other trials' error: a resume reruns it
            self._runs.pop(trial.trial_id, None)
            return
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


def raised_error(trial) -> str:
    """The one-line cause of a trial its trainer's error ended ("" for any other), and where
    its traceback is kept."""
    cause = (trial.last_result or {}).get(ERROR_KEY)
    if not isinstance(cause, str) or not cause:
        return ""
    where = getattr(trial, "path", None)  # the trial's folder in the sweep's storage
    return f"{cause} (traceback: {Path(where) / TRAINER_ERROR_FILE})" if where else cause


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
