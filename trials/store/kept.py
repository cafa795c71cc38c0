"""What a sweep's store holds beyond Tune's result files, kept in the sweep's storage as it
is written, so that `trials recover` can rebuild it after the store is lost.

Tune's result files hold every point a trial reported. What comes later went to the store
alone: a re-evaluation (`trials reeval`: its metrics at their step, its `reeval.*` tags, the
files the workload returned under `eval/`), a timing pass (`trials time`: each
run's values and `timing.pass` tag; the parent's `timing` tag and `timing/pass.json`), and
the sequential record on the parent (the `sequential` tag and `look.<k>` tags each look
writes, a plan `trials augment` fixes, and its `augment/undecided` points). Each is written
here first, then to the store:

    <storage>/<sweep>/evaluations/<trial key hash>/<step>-<kind>.json    a trial run's record
    <storage>/<sweep>/evaluations/<trial key hash>/<step>-<kind>/<path>  its artifact files
    <storage>/<sweep>/evaluations/parent/<time ns>-<kind>.json           a parent run's record
    <storage>/<sweep>/evaluations/parent/<time ns>-<kind>/<path>         its artifact files

A record is JSON {"trial_key" (a trial's only), "kind", "step", "metrics", "tags",
"artifacts": [artifact paths]}, written whole (`write_atomic`) after its artifact files, so
a record that exists is complete. `trials recover` replays the trial records at their steps
and the parent records in the order they were written (`read_records` checks each as input:
one line naming the file). Plain files and `os` only: `analysis` keeps its looks here
without MLflow, torch or `trials`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import time
from pathlib import Path
from .keys import STORAGE_TAG

EVALUATIONS_DIR = "evaluations"
PARENT_DIR = "parent"
KIND_RE = re.compile(r"^[a-z][a-z_]{0,31}$")
PATH_RE = re.compile(r"^[A-Za-z0-9_.@:-]+(/[A-Za-z0-9_.@:-]+)*$")  # an artifact path: no '..', nothing absolute
MAX_RECORD_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 64  # no file the engine or Tune writes nests deeper


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text, outside its strings: a scan,
    so that a crafted file nested a million deep is named instead of overflowing the parser."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # the common case, at C speed
        return text.count("[") + text.count("{")
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def bounded_json(text: str, what: str):
    """JSON text parsed within MAX_JSON_DEPTH; ValueError starting with `what` where it is not
    JSON or nests deeper (the one guarded parse of every storage file)."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"{what}: nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"{what}: not JSON") from None


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file to storage whole or not at all: a temporary file beside it, flushed to
    disk, then `os.replace` (a crash or a full disk leaves the older file, never half of one)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # named by the file meant, not the temporary one
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    finally:
        tmp.unlink(missing_ok=True)


def sweep_storage(parent_tags: dict[str, str], name: str) -> Path | None:
    """The sweep's folder in storage, from its parent run's record of the storage root
    (`sweep.storage`), where this machine sees it; None otherwise (nothing is kept then)."""
    root = parent_tags.get(STORAGE_TAG)
    exp_dir = Path(root) / name if root else None
    return exp_dir if exp_dir is not None and (exp_dir / "spec.yaml").is_file() else None


def key_dir(exp_dir: Path, key: str) -> Path:
    """A trial's folder of records: named by a hash of its key (keys hold '|' and '=')."""
    return Path(exp_dir) / EVALUATIONS_DIR / hashlib.sha256(key.encode()).hexdigest()[:10]


def keep_run_record(exp_dir: Path, key: str, kind: str, step: int, metrics: dict, tags: dict[str, str],
                    artifacts: dict[str, bytes] | None = None) -> None:
    """A trial run's record (what is about to be logged to its run at `step`)."""
    _keep(key_dir(exp_dir, key), f"{step:08d}-{kind}", {"trial_key": key, "kind": kind, "step": step},
          metrics, tags, artifacts or {})


def keep_parent_record(exp_dir: Path, kind: str, tags: dict[str, str], metrics: dict | None = None, step: int = 0,
                       artifacts: dict[str, bytes] | None = None) -> None:
    """A parent run's record, named by the time it is written (replayed in that order)."""
    _keep(Path(exp_dir) / EVALUATIONS_DIR / PARENT_DIR, f"{time.time_ns():020d}-{kind}", {"kind": kind, "step": step},
          metrics or {}, tags, artifacts or {})


def _keep(folder: Path, stem: str, head: dict, metrics: dict, tags: dict[str, str], artifacts: dict[str, bytes]):
    for path in artifacts:
        if not PATH_RE.match(path) or ".." in path.split("/"):
            raise ValueError(f"kept record: {path!r} is not an artifact path")
    for path, data in artifacts.items():  # the files first: the record names only files that exist
        dest = folder / stem / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, data)
    folder.mkdir(parents=True, exist_ok=True)
    record = {**head, "metrics": {k: float(v) for k, v in metrics.items() if _finite(v)},
              "tags": {k: str(v) for k, v in tags.items()}, "artifacts": sorted(artifacts)}
    write_atomic(folder / f"{stem}.json", json.dumps(record))


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_records(exp_dir: Path, keys: list[str], command: str = "recover") -> tuple[list[dict], list[dict]]:
    """The sweep's kept records: (trial records sorted by key and step, parent records in the
    order written), each with "files": artifact path -> its file here. Each file is input: one
    that is not what `keep_*` writes is refused in one line naming it (ValueError)."""
    root = Path(exp_dir) / EVALUATIONS_DIR
    by_dir = {key_dir(exp_dir, k).name: k for k in keys}
    runs, parents = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        key = by_dir.get(folder.name)
        if folder.name != PARENT_DIR and key is None:
            raise ValueError(f"{command}: {folder}: not a trial of this sweep (its records cannot be placed)")
        for path in sorted(folder.glob("*.json")):
            record = _checked(path, key, command)
            (parents if key is None else runs).append(record)
    runs.sort(key=lambda r: (r["trial_key"], r["step"]))
    return runs, parents


def _checked(path: Path, key: str | None, command: str) -> dict:
    """One record, checked; raises ValueError naming the file and its first problem."""
    def bad(what: str):
        return ValueError(f"{command}: {path}: not a kept record ({what})")

    try:
        text = path.read_text() if path.stat().st_size <= MAX_RECORD_BYTES else None
        record = json.loads(text) if text is not None else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        raise bad("unreadable, or not JSON") from None
    if text is None:
        raise bad(f"over {MAX_RECORD_BYTES} bytes")
    if not isinstance(record, dict):
        raise bad("not a JSON object")
    step, kind = record.get("step"), record.get("kind")
    if not isinstance(kind, str) or not KIND_RE.match(kind):
        raise bad(f"kind: {str(kind)[:40]!r}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise bad(f"step: a whole number >= 0, got {str(step)[:40]!r}")
    if key is not None and record.get("trial_key") != key:
        raise bad(f"trial_key: {str(record.get('trial_key'))[:60]!r} is not the trial its folder holds")
    metrics, tags, artifacts = record.get("metrics"), record.get("tags"), record.get("artifacts")
    if not isinstance(metrics, dict) or not all(isinstance(k, str) and _finite(v) for k, v in metrics.items()):
        raise bad("metrics: names and finite numbers")
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise bad("tags: names and text")
    if not isinstance(artifacts, list) or not all(isinstance(a, str) and PATH_RE.match(a) and ".." not in a.split("/")
                                                  for a in artifacts):
        raise bad("artifacts: a list of relative artifact paths")
    files = {a: path.with_suffix("") / a for a in artifacts}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise bad(f"its artifact file {missing[0]} is missing")
    return {**record, "files": files, "path": path}
