"""A sweep's records in its MLflow store, written by the driver alone (a SQLite store takes
one writer): one experiment per sweep, a parent run for the sweep, one child run per trial
(`mlflow.parentRunId`), named by cell and replicate, found again by its `trial_key` tag when
a trial or the sweep resumes, so no run is ever duplicated. The engine opens it
(`trials.tracking.open_ledger`), with the responses the sweep's runs view shows; a sweep and
its trials are read here only through their fields (name, factors, responses, ...; a
trial's key, tags and run name).
"""

from __future__ import annotations

import socket
from typing import Any

from trials.store.client import set_tags, tracking_client
from trials.store.keys import (ARM_TAG, CONFIRMS_TAG, DRIVER_HOST_TAG, DRIVER_PID_TAG, DRIVER_STARTED_TAG, ERROR_TAG,
                   EXPERIMENT_KIND_TAG, GIT_COMMIT_TAG, MODEL_TRAINING, NOTE_TAG, PARENT_TAG, RESPONSES_TAG,
                   RESUMED_TAG, SEQUENTIAL_TAG, SWEEP_PARENT_TAG, SWEEP_TAG, TRIAL_KEY_TAG, metric_name, sweep_parent,
                   sweep_trials)
from trials.store.runs import config_params, git_commit, log_metrics, log_params, source_tags
from trials.store.ui import RUNS_VIEW_TAG, md_text, runs_view
from trials.registry import recorded
from trials.sweep_record import DESCRIPTION_CHARS, SweepRecord, keep_registry, restated, to_parent


def trial_tags(spec, trial, parent_id: str, extra: dict[str, str]) -> dict[str, str]:
    tags = {PARENT_TAG: parent_id, SWEEP_TAG: spec.name, "mlflow.runName": trial.run_name, **trial.tags}
    tags.update(extra)
    tags.update(source_tags("trials run", extra.get(GIT_COMMIT_TAG)))
    return tags


def keep_parent_registry(client, parent_id: str, rules, names) -> None:
    """The parent keeps the registry rows of `names` too (`trials.sweep_record.keep_registry`):
    what a command that adds metrics to a sweep's runs (re-evaluation, timing) calls after."""
    tags = keep_registry(client.get_run(parent_id).data.tags, rules, names)
    if tags:
        set_tags(client, parent_id, tags)


class Ledger:
    """Experiment, parent run and child runs of one sweep in one MLflow store."""

    def __init__(self, tracking_uri: str, spec, identity: dict[str, str] | None = None, shown: tuple = ()):
        self.uri = tracking_uri
        self.spec = spec
        self.identity = dict(identity or {})  # the parent's record of the sweep (`trials.driver.identity`)
        self.client = tracking_client(tracking_uri)
        exp = self.client.get_experiment_by_name(spec.name)
        self.experiment_id = exp.experiment_id if exp else self.client.create_experiment(spec.name)
        if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
            # MLflow 3 opens an experiment of this kind in its model-training (runs) view,
            # not the GenAI "Overview / Traces" page
            self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        # the sweep's runs view (the link `trials run` prints opens it): written each time, as a
        # resume may restate the primary responses
        self.client.set_experiment_tag(self.experiment_id, RUNS_VIEW_TAG, runs_view(
            list(spec.factors), list(shown), (ARM_TAG,) if spec.controls else (),
            levels={f: list(lv) for f, lv in spec.factors.items()}, sweep=spec.name))
        if spec.description and (exp is None or not exp.tags.get(NOTE_TAG)):
            # the experiment's description in the MLflow UI: which question the sweep answers
            self.client.set_experiment_tag(self.experiment_id, NOTE_TAG, md_text(spec.description[:4000]))
        self.parent_id = self._parent()
        self._kept: set[str] = set()  # the names whose registry rows the parent is known to keep

    def _parent(self) -> str:
        record = SweepRecord.of_spec(self.spec, recorded(self.spec.wl.registry, list(self.spec.responses)))
        parent = sweep_parent(self.client, self.experiment_id)
        if parent is not None:
            self._restate(parent, record)
            return parent.info.run_id
        tags, params = to_parent(record, self.spec.factors, self.spec.base, self.spec.replicates)
        if self.spec.description:  # MLflow shows NOTE_TAG as the run's description
            tags[NOTE_TAG] = md_text(self.spec.description[:DESCRIPTION_CHARS])
        run = self.client.create_run(self.experiment_id, run_name=f"sweep {self.spec.name}",
                                     tags={SWEEP_PARENT_TAG: "true", SWEEP_TAG: self.spec.name,
                                           GIT_COMMIT_TAG: git_commit(), **source_tags("trials run"), **self.identity,
                                           **tags})
        from mlflow.entities import Param  # MLflow loads with the store, not with the commands that import this

        self.client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])
        return run.info.run_id

    def _restate(self, parent, record: SweepRecord) -> None:
        """A resumed sweep's parent: what the spec restates now (its primary responses, its
        confirmation), its plan where none was recorded, and the identity checked before any work."""
        tags, run_id = parent.data.tags, parent.info.run_id
        now = restated(record)
        if RESPONSES_TAG in now:
            self.client.set_tag(run_id, RESPONSES_TAG, now[RESPONSES_TAG])
        elif RESPONSES_TAG in tags:  # no empty tag: none declared now
            self.client.delete_tag(run_id, RESPONSES_TAG)
        if CONFIRMS_TAG in now and tags.get(CONFIRMS_TAG) != now[CONFIRMS_TAG]:
            self.client.set_tag(run_id, CONFIRMS_TAG, now[CONFIRMS_TAG])
        if record.sequential and SEQUENTIAL_TAG not in tags:
            self.client.set_tag(run_id, SEQUENTIAL_TAG, record.sequential)
        for k, v in self.identity.items():  # checked before any work: a parent made before them, or moved storage
            if tags.get(k) != v:
                self.client.set_tag(run_id, k, v)

    def keep_registry(self, names) -> None:
        """The rows of `names` (what the sweep's runs report) added to the registry the parent
        keeps (`trials.sweep_record.keep_registry`), so that a reader imports no workload."""
        new = [n for n in names if n not in self._kept]
        if new:
            keep_parent_registry(self.client, self.parent_id, self.spec.wl.registry, new)
            self._kept.update(new)

    def claim(self) -> None:
        """Mark the parent RUNNING under this driver (host, pid and process start time), so
        that `status` and `resume` can tell a sweep whose driver died (kill -9) from one
        still running."""
        import psutil

        me = psutil.Process()
        self.client.update_run(self.parent_id, status="RUNNING")
        for k, v in ((DRIVER_HOST_TAG, socket.gethostname()), (DRIVER_PID_TAG, str(me.pid)),
                     (DRIVER_STARTED_TAG, f"{me.create_time():.3f}")):
            self.client.set_tag(self.parent_id, k, v)

    def child_runs(self) -> dict[str, Any]:
        """trial_key -> run, for this sweep's trials."""
        return {r.data.tags.get(TRIAL_KEY_TAG): r for r in sweep_trials(self.client, self.experiment_id)}

    def open_child(self, trial, extra_tags: dict[str, str]) -> tuple[str, bool]:
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
        self.keep_registry(metrics)
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
