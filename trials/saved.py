"""A sweep as its storage holds it, read without Ray, Tune, torch or MLflow: where the
storage is, the spec and settings saved with a sweep (and their writer), and each trial's
state. `trials status` and `trials list` import only this and answer from storage, so that
they answer well under 2 s."""

from __future__ import annotations

import json
import math
from pathlib import Path

import yaml

from trials.store.client import check_store, tracking_client
from trials.store.kept import read_records, write_atomic
from trials.store.keys import DONE_KEY, ERROR_KEY, is_metric

from . import layout
from . import spec as specmod, validate
from .lease import holder_alive, holder_of, reap_dead_driver
from trials.expand import columns
from trials.spec import SweepSpec
from trials.workload import DEFAULT as DEFAULT_WORKLOAD

DEFAULT_STORAGE = "ray_results"


def storage_root(storage: str | None) -> Path:
    return Path(storage or DEFAULT_STORAGE).expanduser().resolve()


def load_saved(name: str, storage: str | None, command: str = "resume",
               layout: bool = False) -> tuple[SweepSpec, dict]:
    """The spec and settings `trials run` saved with a sweep (`spec.yaml`, `sweep.json`),
    checked as input: a file that is unreadable, not what a run writes, or a spec that no
    longer validates is refused in one line naming it. `layout`: the spec's layout alone
    (`validate.parse_layout`: no workload imported), what `status` and `list` need."""
    if not specmod.NAME_RE.match(name):
        raise specmod.SpecError([f"{command}: {name!r} is not a sweep name (letters, digits, '_', '-' and '.')"])
    exp_dir = storage_root(storage) / name
    if not (exp_dir / "spec.yaml").is_file():
        raise specmod.SpecError([f"{command}: no sweep {name!r} under {storage_root(storage)}"])
    return saved_spec(exp_dir / "spec.yaml", command, layout), saved_settings(exp_dir / "sweep.json", command)


def saved_spec(path: Path, command: str, layout: bool = False) -> SweepSpec:
    """A sweep's saved spec, or one line naming the file and its first problem."""
    try:
        return validate.load_spec(path, trusted=False, layout=layout)  # storage's workload: never imported on its say-so
    except specmod.SpecError as e:
        first = e.problems[0]
        more = f" (and {len(e.problems) - 1} more problem(s))" if len(e.problems) > 1 else ""
        if first.startswith(f"spec: {path}"):  # the file itself: not UTF-8, not YAML, too large
            raise ValueError(f"{command}: {first.removeprefix('spec: ')}{more}") from None
        raise ValueError(f"{command}: {path}: not a usable saved spec: {first}{more}") from None
    except OSError as e:
        raise ValueError(f"{command}: {path}: cannot be read ({e.strerror or type(e).__name__})") from None


def saved_settings(path: Path, command: str) -> dict:
    """A sweep's saved settings (`sweep.json`: its store, its concurrency and the responses its
    status shows), or one line naming the file and what is wrong with it."""
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
    shown = meta.get("responses", [])  # a sweep saved before they were kept: none
    if not isinstance(shown, list) or not all(isinstance(r, str) and r for r in shown):
        raise ValueError(f"{command}: {path}: responses: a list of response names, got {str(shown)[:60]!r}")
    return meta


def status(spec: SweepSpec, exp_dir: Path, tracking_uri: str, shown=()) -> list[dict[str, str]]:
    """One row per trial: its run name, state (finished / running / failed / killed /
    pending) and primary responses, from the sweep's storage alone (Tune's result and error
    files, the records `trials reeval` and `time` keep, the driver's lease): no store is
    opened, so it answers at once. Only where the lease names a driver that died (kill -9)
    is the store opened, to close the runs it left RUNNING (`reap_dead_driver`)."""
    held = holder_of(exp_dir)
    alive = held is not None and holder_alive(*held)
    if held is not None and not alive:
        _reap(spec.name, tracking_uri)
    keys = [t.key for t in spec.trials]
    dirs = layout.trial_dirs(keys, exp_dir, with_results=False)
    later: dict[str, list[dict]] = {}
    for record in read_records(exp_dir, keys, "status")[0]:
        later.setdefault(record["trial_key"], []).append(record)
    cols = columns(spec) or list(shown)  # its primary responses, or its workload's defaults as it ran
    rows = []
    for t in spec.trials:
        found = dirs.get(t.key, [])
        results = layout.read_results(found)
        row = {"run": t.run_name, "state": _state(found, results, alive)}
        if row["state"] == "failed":
            row["cause"] = _cause(found[-1], results)
        values = _latest(results + later.get(t.key, []))
        so_far = "~" if row["state"] == "running" else ""  # the latest evaluation, not the final value
        for c in cols:
            v = values.get(c)
            row[c] = f"{so_far}{v:.4g}" if v is not None else ""
        rows.append(row)
    return rows


def _state(found: list[Path], results: list[dict], alive: bool) -> str:
    if results and results[-1].get(DONE_KEY):
        return "finished"
    if results and results[-1].get(ERROR_KEY):  # its trainer raised: ended, not restarted
        return "failed"
    if not found:
        return "pending"
    if alive:  # an error file may be one Tune has restarted the trial after
        return "failed" if layout.failed_last(found[-1]) else "running"
    return "failed" if layout.errored(found[-1]) else "killed"


def _cause(folder: Path, results: list[dict]) -> str:
    """A failed trial's cause in one line: its trainer's error, else the last line of Tune's
    error file (a crash that used up its retries)."""
    raised = results[-1].get(ERROR_KEY) if results else None
    if isinstance(raised, str) and raised:
        return raised
    try:
        lines = [x for x in (folder / layout.ERROR_FILE).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no cause recorded"
    return lines[-1].strip() if lines else "no cause recorded"


def _latest(points: list[dict]) -> dict[str, float]:
    """Each metric's value at its latest step, over Tune's results and the kept records
    (`{"step", "metrics"}`) alike."""
    out: dict[str, tuple[int, float]] = {}
    for p in points:
        step = int(p.get("step", 0) or 0)
        for k, v in (p.get("metrics") or p).items():
            if is_metric(k) and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and \
                    step >= out.get(k, (-1, 0.0))[0]:
                out[k] = (step, float(v))
    return {k: v for k, (_, v) in out.items()}


def _reap(name: str, tracking_uri: str) -> None:
    """Close the runs a dead driver left RUNNING in the store, where the store has the sweep."""
    check_store(tracking_uri)
    client = tracking_client(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        reap_dead_driver(client, exp.experiment_id)


def save_sweep_files(exp_dir: Path, spec: SweepSpec, tracking_uri: str, max_concurrent) -> None:
    """`spec.yaml` and `sweep.json` beside Tune's experiment folder, each written whole. The
    responses its progress shows are kept resolved (a spec without `responses:` shows its
    workload's defaults), since `status` reads the layout alone and imports no workload."""
    raw = {"name": spec.name, "base": spec.base, "factors": spec.factors, "replicates": spec.replicates,
           "controls": spec.controls, "resources": spec.resources, "max_concurrent": spec.max_concurrent,
           "max_failures": spec.max_failures, "description": spec.description, "responses": spec.responses}
    if spec.workload != DEFAULT_WORKLOAD:
        raw = {"workload": spec.workload, **raw}
    if spec.contrasts:
        raw["contrasts"] = spec.contrasts
    if spec.primary_terms:
        raw["primary_terms"] = spec.primary_terms
    if spec.sequential:
        raw["sequential"] = spec.sequential
    if spec.confirms:
        raw["confirms"] = spec.confirms
    if spec.timing:
        raw["timing"] = spec.timing
    if spec.generators:
        raw["design"] = {"generators": {g: "*".join(p) for g, p in spec.generators.items()}}
    # each whole or not at all: a reader (status, list, resume) never meets half a file
    write_atomic(exp_dir / "spec.yaml", yaml.safe_dump(raw, sort_keys=False))
    write_atomic(exp_dir / "sweep.json", json.dumps({"tracking_uri": tracking_uri, "max_concurrent": max_concurrent,
                                                     "responses": columns(spec)}))


def grouped_causes(causes: list[tuple[str, str]]) -> list[str]:
    """One line per cause of (run name, cause) pairs, the most frequent first: how many
    trials it ended and one run that shows it."""
    by: dict[str, list[str]] = {}
    kept: dict[str, str] = {}
    for name, cause in causes:  # the same cause of other runs: its own run's name and files aside
        said, _, where = cause.replace(f"run {name}: ", "").partition(" (traceback: ")
        by.setdefault(said[:300], []).append(name)
        kept.setdefault(said[:300], f" (traceback: {where}" if where else "")
    return [f"failed: {len(names)} trial(s), e.g. {names[0]}: {cause}{kept[cause]}"
            for cause, names in sorted(by.items(), key=lambda kv: -len(kv[1]))]
