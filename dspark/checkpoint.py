"""The checkpoint format: a folder `checkpoint/` in a run's out_dir holding

    state.pt       the whole state of a run (torch.save of a dict of tensors, numbers and
                   JSON strings, so that it loads with weights_only=True)
    state.sha256   the SHA-256 of state.pt, written after it, checked before loading
    config.json    the run's config, for a person to read
    artifacts/     a copy of the run's artifacts folder, where it has one

Written here (`write_checkpoint`, atomically: a folder beside it, then a rename), checked
here (`checkpoint_problem`: is it intact) and read here (`read_checkpoint`: intact, a
dspark state, and one that the config resuming from it would train on unchanged). What the
state holds is the trainer's (`dspark.train.Trainer.save_checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch

from .config import Config, from_dict, with_role

STATE_FILE = "state.pt"
CHECKSUM_FILE = "state.sha256"  # beside state.pt: its SHA-256, written after it, checked before loading
# what every dspark state holds (a dict without them is some other torch file)
REQUIRED_KEYS = ("config", "data_sha256", "stage", "step", "head", "rng", "history")

# Config fields that do not change what trains (the evaluation and plumbing roles): every
# other field must match a checkpoint's for a run to resume from it.
NOT_TRAINING = with_role("evaluation", "plumbing")


def training_changes(saved: dict[str, Any], cfg: Config) -> list[str]:
    """The fields whose value in `cfg` would train something other than the checkpoint
    `saved` (a config dict) did, compared on resolved values."""
    try:
        before = from_dict(saved).objective_dict()
    except (ValueError, TypeError) as e:
        raise ValueError(f"resume: the checkpoint's config is not valid ({e})") from None
    now = cfg.objective_dict()
    keys = sorted((set(before) | set(now)) - set(NOT_TRAINING))
    return [k for k in keys if before.get(k) != now.get(k)]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_checkpoint(out_dir: str | os.PathLike, state: dict[str, Any], config: dict[str, Any]) -> Path:
    """Write `state` (with `config`, the run's config dict) as out_dir/checkpoint, with a
    copy of out_dir/artifacts where there is one, replacing the one there. Written into
    checkpoint.tmp first and renamed, so a kill mid-write leaves the previous one whole."""
    out_dir = Path(out_dir)
    ckpt, tmp = out_dir / "checkpoint", out_dir / "checkpoint.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / STATE_FILE)
    (tmp / CHECKSUM_FILE).write_text(_sha256(tmp / STATE_FILE))
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    if (out_dir / "artifacts").is_dir():
        shutil.copytree(out_dir / "artifacts", tmp / "artifacts")
    shutil.rmtree(ckpt, ignore_errors=True)
    os.replace(tmp, ckpt)
    return ckpt


def checkpoint_problem(ckpt_dir: str | os.PathLike) -> str | None:
    """Why a checkpoint folder is not intact (None when it is): no state.pt, or a state.pt
    whose bytes are not the ones its checksum recorded (a copy cut short by a full disk or
    a kill). A checkpoint written before checksums existed is judged by loading alone."""
    d = Path(ckpt_dir)
    if not d.is_dir():
        return f"{d} is not a checkpoint directory"
    if not (d / STATE_FILE).is_file():
        return f"{d} holds no {STATE_FILE}"
    try:
        if (d / CHECKSUM_FILE).is_file():
            if _sha256(d / STATE_FILE) != (d / CHECKSUM_FILE).read_text().strip():
                return f"{d / STATE_FILE} does not match its checksum (truncated or altered)"
        elif not zipfile.is_zipfile(d / STATE_FILE):  # torch's format is a zip: a cut one lacks its directory
            return f"{d / STATE_FILE} is not a dspark checkpoint (cut short, or not a torch file)"
    except (OSError, UnicodeDecodeError) as e:  # unreadable: permissions, an I/O error
        return f"{d} cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})"
    return None


def read_checkpoint(ckpt_dir: str | os.PathLike, cfg: Config, device="cpu", mmap: bool = False) -> dict:
    """A checkpoint's state (weights_only), refused with one line when it is not an intact
    dspark checkpoint or when `cfg` would train something other than it did. `mmap`: the
    tensors are mapped, not read (a check that it loads, at little cost)."""
    path = Path(ckpt_dir) / STATE_FILE
    problem = checkpoint_problem(ckpt_dir)
    if problem:
        raise ValueError(f"resume: {problem}")
    try:
        state = torch.load(path, map_location=device, weights_only=True, mmap=mmap)
        saved = json.loads(state["config"])
        for key in REQUIRED_KEYS:
            state[key]
    except Exception as e:  # truncated, random bytes, a refused pickle, another dict
        raise ValueError(f"resume: {path} is not a dspark checkpoint ({type(e).__name__})") from None
    changed = training_changes(saved, cfg)
    if changed:
        now = cfg.to_dict()
        raise ValueError("resume: the checkpoint trained with other values of " + ", ".join(
            f"{k} ({saved.get(k)!r}, now {now.get(k)!r})" for k in changed) + "; resuming would change what trains")
    return state
