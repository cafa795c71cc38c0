"""A sweep's storage folder, as Tune and the engine lay it out, in one place: where each
trial's folders are, its result file, its checkpoints, its error, and the files the
engine writes beside them. Tune's part of this layout is not a public interface of Tune
(`StorageContext` is a DeveloperAPI), so everything that reads or writes it goes through
this module, and `tests/trials/test_layout_format.py` runs a real Tune trial and fails
loudly if the installed Tune lays it out otherwise.

    <storage>/<sweep>/spec.yaml, sweep.json        the sweep as `trials run` saved it
    <storage>/<sweep>/experiment.json              its experiment and parent run in the store
    <storage>/<sweep>/<trial id>_<key>_<key hash>/ one folder per trial start (Tune's)
        result.json                                every result, one JSON object per line
        error.txt                                  the trial's last error (a failed trial)
        checkpoint_<n>/                            its checkpoints, as the workload saved them
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

from trials.store.kept import bounded_json

RESULT_FILE = "result.json"  # Tune's: ray.tune.result.EXPR_RESULT_FILE
ERROR_FILE = "error.txt"  # Tune's: ray.air.constants.EXPR_ERROR_FILE
CHECKPOINT_GLOB = "checkpoint_*"
EXPERIMENT_FILE = "experiment.json"


def key_hash(key: str) -> str:
    """What a trial's folders end in: its key's hash (a key may be longer than a file name)."""
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def trial_dirname(trial_id: str, key: str) -> str:
    """A trial's folder name: Tune's trial id, the key made safe for a file name, its hash."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in key)
    return f"{trial_id}_{safe[:80]}_{key_hash(key)}"


def trial_dirs(keys, exp_dir: Path, with_results: bool = True) -> dict[str, list[Path]]:
    """trial key -> its trial folders (more than one if Tune restarted it in a new folder),
    oldest first; with `with_results`, only those holding a result file."""
    by_hash = {key_hash(k): k for k in keys}
    out: dict[str, list[Path]] = {}
    for d in sorted(p for p in exp_dir.iterdir() if p.is_dir()) if exp_dir.is_dir() else []:
        key = by_hash.get(d.name.rsplit("_", 1)[-1])
        if key is not None and (not with_results or (d / RESULT_FILE).is_file()):
            out.setdefault(key, []).append(d)
    for dirs in out.values():
        dirs.sort(key=_started)
    return out


def _started(d: Path) -> int:
    found = [p for p in (d / RESULT_FILE, d) if p.exists()]
    return found[0].stat().st_mtime_ns


MAX_RESULT_BYTES = 512 * 1024 * 1024  # a trial's result file: Tune's lines are kilobytes each


class StorageFileError(ValueError):
    """A file in a sweep's storage that is not what Tune or the engine writes: one line naming
    it, what is wrong and what to do."""


def read_results(dirs: list[Path]) -> list[dict]:
    """Every result of a trial, in the order Tune wrote them, each line checked as input
    (bounded size and nesting, an object, its `step` a whole number and `done` a flag). A
    last line cut short by a crash is skipped: its result was never complete. Anything else
    raises StorageFileError naming the file and line."""
    out = []
    for d in dirs:
        path = d / RESULT_FILE
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_RESULT_BYTES:
            raise _bad(path, 0, f"over {MAX_RESULT_BYTES // 2**20} MiB")
        lines = path.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines, 1):
            try:
                result = bounded_json(line, "it")
            except ValueError as e:
                if i == len(lines) and "not JSON" in str(e):
                    continue  # cut by a crash mid-write
                raise _bad(path, i, str(e).removeprefix("it: ")) from None
            out.append(_checked_result(result, path, i))
    return out


def _checked_result(result, path: Path, line: int) -> dict:
    if not isinstance(result, dict):
        raise _bad(path, line, "not a JSON object")
    step = result.get("step")  # a trainer may report it as a float (12.0)
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or not step >= 0
                             or step == float("inf")):
        raise _bad(path, line, f"step: a number >= 0, got {str(step)[:40]!r}")
    if not isinstance(result.get("done", False), bool):
        raise _bad(path, line, f"done: true or false, got {str(result['done'])[:40]!r}")
    return result


def _bad(path: Path, line: int, what: str) -> StorageFileError:
    where = f"{path}, line {line}" if line else str(path)
    return StorageFileError(f"{where}: {what}: not a result Tune wrote; move the trial's folder {path.parent.name} "
                            "aside (resume then reruns that trial) or restore it from a copy")


def errored(d: Path) -> bool:
    """Whether Tune recorded an error of the trial in this folder."""
    return (d / ERROR_FILE).is_file()


def failed_last(d: Path) -> bool:
    """Whether a trial folder's newest event is an error (Tune's error file written after
    its last result): what tells a failed trial from one Tune restarted while its sweep runs."""
    error, result = d / ERROR_FILE, d / RESULT_FILE
    return error.is_file() and (not result.is_file() or error.stat().st_mtime_ns >= result.stat().st_mtime_ns)


def checkpoints(exp_dir: Path, key: str, marker: str) -> list[Path]:
    """A trial's checkpoint folders holding `marker` (the workload's file in each), newest first."""
    found = [p.parent for d in exp_dir.glob(f"*_{key_hash(key)}") if d.is_dir()
             for p in d.glob(f"{CHECKPOINT_GLOB}/{marker}")]
    return sorted(found, key=lambda c: (c / marker).stat().st_mtime_ns, reverse=True)


def latest_checkpoints(exp_dir: Path, trials, wl) -> dict[str, str]:
    """trial key -> its newest intact checkpoint folder under the sweep's storage. Nothing is
    unpickled here: the workload `wl` checks its checkpoint files (DSpark: state.pt against
    its checksum); a checkpoint that is not intact is skipped with a warning for an older one."""
    out = {}
    for t in trials:
        for ckpt in checkpoints(exp_dir, t.key, wl.checkpoint_file):
            problem = wl.checkpoint_problem(ckpt)
            if problem is None:
                out[t.key] = str(ckpt)
                break
            warnings.warn(f"resume: {t.key}: skipping a checkpoint that is not intact ({problem}); "
                          "trying an older one", stacklevel=2)
    return out


def save_experiment(exp_dir: Path, experiment_id: str, parent_run_id: str, write) -> None:
    """Where the sweep's records are in its store, kept beside the spec so that `trials
    list` links to them without asking the store."""
    write(exp_dir / EXPERIMENT_FILE, json.dumps({"experiment_id": experiment_id, "parent_run_id": parent_run_id}))


def saved_experiment(exp_dir: Path) -> dict[str, str]:
    """{"experiment_id", "parent_run_id"} as the sweep saved them ({} if it did not, or
    the file is not a record of them)."""
    try:
        found = bounded_json((exp_dir / EXPERIMENT_FILE).read_text(errors="replace"), EXPERIMENT_FILE)
    except (OSError, ValueError):
        return {}
    ok = isinstance(found, dict) and all(isinstance(found.get(k), str) for k in ("experiment_id", "parent_run_id"))
    return found if ok else {}


def persist_results(trial, storage_full) -> None:
    """Copy the trial's result file from the driver's staging folder into storage now.

    Tune writes `result.json` under /tmp/ray/session_*/.../driver_artifacts and copies it to
    storage only every so often (its experiment checkpoints): a driver killed with SIGKILL
    right after a trial ended left a FINISHED run whose last points storage lacked, so
    `trials recover` would have rebuilt it as unfinished. Done at each result and before a
    run is marked FINISHED or FAILED, storage holds every point of every closed run and all
    but the latest of a running one. `storage_full(error, root)` is raised where the disk is full."""
    storage = getattr(trial, "storage", None)
    if storage is None:
        return
    try:
        src = Path(storage.trial_driver_staging_path) / RESULT_FILE
        dst = Path(storage.trial_fs_path) / RESULT_FILE
    except (RuntimeError, AttributeError):
        return  # no trial folder yet
    if not src.is_file() or src == dst:
        return
    from pyarrow.fs import LocalFileSystem, copy_files

    try:
        if isinstance(storage.storage_filesystem, LocalFileSystem):
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{RESULT_FILE}.{os.getpid()}.tmp")
            try:
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)  # a kill mid-copy leaves the older whole file, never half of one
            finally:
                tmp.unlink(missing_ok=True)
        else:
            copy_files(str(src), dst.as_posix(), source_filesystem=LocalFileSystem(),
                       destination_filesystem=storage.storage_filesystem)
    except OSError as e:
        storage_full(e, Path(storage.trial_fs_path).parent.parent)
        raise
