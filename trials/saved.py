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
    """The spec and settings `trials run` saved with a sweep (`spec.yaml`, `sweep.json`),
    checked as input: a file that is unreadable, not what a run writes, or a spec that no
    longer validates is refused in one line naming it."""
    if not specmod.NAME_RE.match(name):
        raise specmod.SpecError([f"{command}: {name!r} is not a sweep name (letters, digits, '_', '-' and '.')"])
    exp_dir = storage_root(storage) / name
    if not (exp_dir / "spec.yaml").is_file():
        raise specmod.SpecError([f"{command}: no sweep {name!r} under {storage_root(storage)}"])
    return saved_spec(exp_dir / "spec.yaml", command), saved_settings(exp_dir / "sweep.json", command)


def saved_spec(path: Path, command: str) -> SweepSpec:
    """A sweep's saved spec, or one line naming the file and its first problem."""
    try:
        return specmod.load(path)
    except specmod.SpecError as e:
        first = e.problems[0]
        more = f" (and {len(e.problems) - 1} more problem(s))" if len(e.problems) > 1 else ""
        if first.startswith(f"spec: {path}"):  # the file itself: not UTF-8, not YAML, too large
            raise ValueError(f"{command}: {first.removeprefix('spec: ')}{more}") from None
        raise ValueError(f"{command}: {path}: not a usable saved spec: {first}{more}") from None
    except OSError as e:
        raise ValueError(f"{command}: {path}: cannot be read ({e.strerror or type(e).__name__})") from None


def saved_settings(path: Path, command: str) -> dict:
    """A sweep's saved settings (`sweep.json`: its store and concurrency), or one line naming
    the file and what is wrong with it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"{command}: {path} is missing (`trials run` writes it beside spec.yaml)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{command}: {path} cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})"
                         ) from None
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError):
        what = "empty" if not text.strip() else "not JSON"
        raise ValueError(f"{command}: {path} is {what} (a sweep's settings: {{\"tracking_uri\": ...}})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{command}: {path} is not a sweep's settings (a JSON object), got {text.strip()[:40]!r}")
    if not isinstance(meta.get("tracking_uri"), str) or not meta["tracking_uri"]:
        raise ValueError(f"{command}: {path}: tracking_uri: the sweep's MLflow store, got "
                         f"{str(meta.get('tracking_uri'))[:40]!r}")
    concurrent = meta.get("max_concurrent")
    if concurrent is not None and (isinstance(concurrent, bool) or not isinstance(concurrent, int) or concurrent < 0):
        raise ValueError(f"{command}: {path}: max_concurrent: an integer >= 0 or null, got {str(concurrent)[:40]!r}")
    return meta


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
