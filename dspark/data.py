"""The byte corpus: documents from files, folders, globs or Parquet, split by document.

With no data argument the corpus is the Python standard library source of the running
interpreter: real text, present on every machine, no download. Splits are made by
document (each document goes wholly to train, validation or calibration), chosen by a
hash of the document's name so that adding a file does not reshuffle the others.
"""

from __future__ import annotations

import glob
import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SPLITS = ("train", "val", "calib")
DOC_SEPARATOR = b"\n\x00\n"  # marks a document boundary inside a split's byte stream


@dataclass
class Corpus:
    train: torch.Tensor  # (N,) uint8
    val: torch.Tensor
    calib: torch.Tensor
    sha256: str  # content hash of every document, names included
    n_docs: dict[str, int]

    def split(self, name: str) -> torch.Tensor:
        return getattr(self, name)


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts]
    return sorted(files)


def _read_parquet(path: Path, column: str) -> list[tuple[str, bytes]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if column not in table.column_names:
        raise ValueError(f"data: {path} has no column {column!r} (columns: {', '.join(table.column_names)})")
    texts = table.column(column).to_pylist()
    return [(f"{path}#{i}", (t or "").encode("utf-8")) for i, t in enumerate(texts)]


def load_documents(sources: tuple[str, ...] | list[str], text_column: str = "text") -> list[tuple[str, bytes]]:
    """Expand sources into (name, bytes) documents, in a deterministic order."""
    if not sources:
        root = Path(sysconfig.get_paths()["stdlib"])
        return [(str(p.relative_to(root)), p.read_bytes()) for p in stdlib_files()]
    paths: list[Path] = []
    for src in sources:
        if any(ch in src for ch in "*?["):
            matched = sorted(Path(p) for p in glob.glob(src, recursive=True) if os.path.isfile(p))
            if not matched:
                raise ValueError(f"data: glob {src!r} matches no file")
            paths.extend(matched)
        elif os.path.isdir(src):
            found = sorted(p for p in Path(src).rglob("*") if p.is_file())
            if not found:
                raise ValueError(f"data: folder {src!r} holds no file")
            paths.extend(found)
        elif os.path.isfile(src):
            paths.append(Path(src))
        else:
            raise ValueError(f"data: {src!r} is not a file, folder or glob that exists")
    docs: list[tuple[str, bytes]] = []
    for p in paths:
        if p.suffix == ".parquet":
            docs.extend(_read_parquet(p, text_column))
        else:
            docs.append((str(p), p.read_bytes()))
    return docs


def _split_of(name: str) -> str:
    # ~90/5/5 by a hash of the name: stable when documents are added or removed
    bucket = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little") % 100
    return "val" if bucket < 5 else "calib" if bucket < 10 else "train"


def build_corpus(sources: tuple[str, ...] | list[str] = (), text_column: str = "text",
                 min_len: int = 2, max_bytes: int = 0) -> Corpus:
    """Load, hash and split. Refuses a corpus with a split shorter than `min_len` bytes."""
    docs = [(n, b) for n, b in load_documents(sources, text_column) if b]
    if not docs:
        raise ValueError("data: the corpus holds no non-empty document")
    if max_bytes:
        # cap by taking whole documents in name-hash order, so the cap is deterministic
        docs.sort(key=lambda d: hashlib.sha256(d[0].encode()).digest())
        kept, total = [], 0
        for d in docs:
            if total >= max_bytes:
                break
            kept.append(d)
            total += len(d[1])
        docs = sorted(kept)
    h = hashlib.sha256()
    parts: dict[str, list[bytes]] = {s: [] for s in SPLITS}
    for name, body in docs:
        h.update(name.encode() + b"\0" + hashlib.sha256(body).digest())
        parts[_split_of(name)].append(body)
    # a tiny corpus can leave a hash bucket empty: give val and calib one document each
    for s in ("val", "calib"):
        if not parts[s] and len(parts["train"]) > 1:
            parts[s].append(parts["train"].pop())
    streams = {}
    for s in SPLITS:
        joined = DOC_SEPARATOR.join(parts[s])
        streams[s] = torch.from_numpy(np.frombuffer(joined, dtype=np.uint8).copy())
        if len(joined) < min_len:
            raise ValueError(
                f"data: the {s} split holds {len(joined)} bytes from {len(parts[s])} document(s); "
                f"need at least {min_len} (one training sequence of seq_len+1 bytes)"
            )
    return Corpus(train=streams["train"], val=streams["val"], calib=streams["calib"],
                  sha256=h.hexdigest(), n_docs={s: len(parts[s]) for s in SPLITS})


def sample_batch(stream: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Random windows of `length` bytes from a split: (B, length) int64."""
    starts = torch.randint(0, len(stream) - length + 1, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(length)
    return stream[idx].long()


def fixed_batches(stream: torch.Tensor, n_batches: int, batch_size: int, length: int) -> list[torch.Tensor]:
    """Evenly spaced, deterministic windows for evaluation: n_batches of (B, length)."""
    n = n_batches * batch_size
    span = len(stream) - length
    starts = torch.linspace(0, max(span, 0), n).long()
    idx = starts[:, None] + torch.arange(length)
    return list(stream[idx].long().split(batch_size))
