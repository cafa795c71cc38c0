"""A sweep as storage and its store hold it, read without Ray, Tune or torch: where the
storage is, the spec and settings saved with a sweep, and each trial's state. `trials status`
and `trials list` import only this, and read the store through `dspark.reader`, so that
they answer well under 2 s."""

from __future__ import annotations

import json
from pathlib import Path

from dspark.record import TRIAL_KEY_TAG, check_store, store_key, sweep_trials

from . import spec as specmod
from .lease import driver_died, reap_dead_driver
from .spec import SweepSpec, columns

DEFAULT_STORAGE = "ray_results"


def storage_root(storage: str | None) -> Path:
    return Path(storage or DEFAULT_STORAGE).expanduser().resolve()


def load_saved(name: str, storage: str | None, command: str = "resume") -> tuple[SweepSpec, dict]:
    if not specmod.NAME_RE.match(name):
        raise specmod.SpecError([f"{command}: {name!r} is not a sweep name (letters, digits, '_', '-' and '.')"])
    exp_dir = storage_root(storage) / name
    if not (exp_dir / "spec.yaml").is_file():
        raise specmod.SpecError([f"{command}: no sweep {name!r} under {storage_root(storage)}"])
    spec = specmod.load(exp_dir / "spec.yaml")
    meta = json.loads((exp_dir / "sweep.json").read_text())
    return spec, meta


def status(spec: SweepSpec, tracking_uri: str) -> list[dict[str, str]]:
    """One row per trial: cell, replicate, state (finished / running / failed / pending).
    Read without MLflow (`dspark.reader`); MLflow's client is opened only to close the runs
    of a driver that died (`reap_dead_driver`)."""
    from dspark.reader import reading_client

    check_store(tracking_uri)
    reader = reading_client(tracking_uri)
    exp = reader.get_experiment_by_name(spec.name)
    runs = {}
    if exp is not None:
        if driver_died(reader, exp.experiment_id):
            from dspark.record import tracking_client

            reap_dead_driver(tracking_client(tracking_uri), exp.experiment_id)
        runs = {r.data.tags[TRIAL_KEY_TAG]: r for r in sweep_trials(reader, exp.experiment_id)}
    rows = []
    names = {"FINISHED": "finished", "RUNNING": "running", "FAILED": "failed", "KILLED": "killed",
             "SCHEDULED": "pending"}
    cols = columns(spec)  # the sweep's primary responses: never a degenerate or constant one
    for t in spec.trials:
        r = runs.get(t.key)
        row = {"run": t.run_name, "state": names.get(r.info.status, r.info.status.lower()) if r else "pending"}
        for c in cols:
            v = r.data.metrics.get(store_key(c)) if r else None
            row[c] = f"{v:.4g}" if v is not None else ""
        rows.append(row)
    return rows
