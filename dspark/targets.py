"""Target addressing: where a trained target LM lives and how it is found again.

A target is addressed by content: the hash of the config fields that shape its training
(`Config.target_dict`) and of the corpus it trained on. Trials whose targets share an
address share one file, `<storage>/targets/<target hash>.pt`, trained once. Files are
written atomically and loaded with `weights_only=True`, so a file that is not a saved
target (or a pickle that would run code) is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import uuid
from pathlib import Path

import torch

from .config import Config
from .data import build_corpus
from .hf_target import rebuild
from .model import TargetLM


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """A file written whole or not at all (a temporary file beside it, then `os.replace`), so
    that a reader of the shared target's progress never sees half of it. The engine's store
    has its own for storage (`trials.store.kept`): the workload imports no engine module."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def target_hash(cfg: Config, data_sha256: str) -> str:
    """Content address of a target: its config fields and the corpus hash."""
    blob = json.dumps({**cfg.target_dict(), "data_sha256": data_sha256}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def corpus_sha256(cfg: Config, cache: dict[str, str] | None = None) -> str:
    """The content hash of a config's corpus; `cache` (keyed by the data source) lets many
    configs on one corpus read it once."""
    key = json.dumps([cfg.data, cfg.text_column, cfg.max_corpus_bytes])
    if cache is None or key not in cache:
        sha = build_corpus(cfg.data, cfg.text_column, min_len=cfg.seq_len + 1, max_bytes=cfg.max_corpus_bytes).sha256
        if cache is None:
            return sha
        cache[key] = sha
    return cache[key]


def address(cfg: Config, cache: dict[str, str] | None = None) -> tuple[str, str]:
    """(target hash, corpus hash) of the target this config trains or needs."""
    sha = corpus_sha256(cfg, cache)
    return target_hash(cfg, sha), sha


def target_file(storage: str | os.PathLike, target_hash_: str) -> Path:
    return Path(storage) / "targets" / f"{target_hash_}.pt"


def save_target(path: str | os.PathLike, target: TargetLM, meta: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of this writer's own: two sweeps' drivers may train the same target at once
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    torch.save({"arch": target.arch(), "state": target.state_dict(), "meta": json.dumps(meta)}, tmp)
    os.replace(tmp, path)  # readers never see a half-written target


def load_target(path: str | os.PathLike, device="cpu") -> tuple[TargetLM, dict]:
    """A target saved by `save_target`; anything else is refused with one line."""
    if not Path(path).is_file():
        raise ValueError(f"target_path: {path} is not a file")
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
        target = rebuild(blob["arch"]) if "hf" in blob["arch"] else TargetLM(**blob["arch"])
        target.load_state_dict(blob["state"])
        meta = json.loads(blob["meta"])
    except Exception as e:  # not a torch file, a pickle refused by weights_only, another dict
        raise ValueError(f"target_path: {path} is not a saved dspark target ({type(e).__name__})") from None
    return target.to(device), meta
