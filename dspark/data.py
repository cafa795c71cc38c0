"""The byte corpus: documents from files, folders, globs or Parquet, split by document.

With no data argument the corpus is the Python standard library source of the running
interpreter: real text, present on every machine, no download. Splits are made by
document (each document goes wholly to train, validation or calibration), chosen by a
hash of the document's name so that adding a file does not reshuffle the others.

A corpus of fewer than `MIN_DOCS` documents (a single large file, say) is first cut into
consecutive chunks of `CHUNK_BYTES` bytes, named `<name>#<i>`, which then split like
documents: deterministic, and every split gets text. A corpus whose bytes are mostly not
text (control bytes other than tab, newline, form feed and carriage return, or invalid
UTF-8) is refused; more than `WARN_NON_TEXT` of them gets a warning naming the fraction.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

SPLITS = ("train", "val", "calib")
MIN_DOCS = 20  # fewer documents than this are cut into chunks
CHUNK_BYTES = 16_384
MAX_NON_TEXT = 0.30  # refuse above this fraction of non-text bytes
WARN_NON_TEXT = 0.05
DOC_SEPARATOR = b"\n\x00\n"  # marks a document boundary inside a split's byte stream


@dataclass
class Corpus:
    train: torch.Tensor  # (N,) uint8
    val: torch.Tensor
    calib: torch.Tensor
    sha256: str  # content hash of every document, names included
    n_docs: dict[str, int]
    duplicates: int = 0  # documents dropped because an earlier one had the same bytes


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts]
    return sorted(files)


def _read_parquet(path: Path, column: str, name: str) -> list[tuple[str, bytes]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=None)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"data: {_shown(path)} is not a readable parquet file ({type(e).__name__})") from None
    if column not in table.column_names:
        raise ValueError(f"data: {_shown(path)} has no column {column!r} (columns: {', '.join(table.column_names)})")
    kind = table.schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ValueError(f"data: {_shown(path)} column {column!r} holds {kind}, not text")
    texts = table.column(column).to_pylist()
    return [(f"{name}#{i}", (t or "").encode("utf-8")) for i, t in enumerate(texts)]


def _shown(path: Path | str) -> str:
    """A path for an error message, printable whatever bytes its name holds."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def _key(name: str) -> bytes:
    """A document name as bytes for hashing; a file name that is not UTF-8 keeps its bytes."""
    return name.encode("utf-8", errors="surrogateescape")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ValueError(f"data: cannot read {_shown(path)} ({e.strerror or type(e).__name__})") from None


def load_documents(sources: tuple[str, ...] | list[str], text_column: str = "text") -> list[tuple[str, bytes]]:
    """Expand sources into (name, bytes) documents, in a deterministic order."""
    if not sources:
        root = Path(sysconfig.get_paths()["stdlib"])
        return [(str(p.relative_to(root)), p.read_bytes()) for p in stdlib_files()]
    # (path, name): a document is named relative to its source (a folder, a glob's fixed
    # part, or the file itself), so the split and the corpus hash do not depend on where
    # the corpus lies on a machine
    paths: list[tuple[Path, str]] = []
    for src in sources:
        if any(ch in src for ch in "*?["):
            matched = _glob(src)
            if not matched:
                raise ValueError(f"data: glob {src!r} matches no file")
            fixed = re.split(r"[*?\[]", src, maxsplit=1)[0]  # "data/x*.txt" -> "data/x"
            root = Path(fixed) if fixed.endswith(os.sep) or not fixed else Path(fixed).parent
            paths.extend((p, _relative(p, root)) for p in matched)
        elif os.path.isdir(src):
            found = _walk(Path(src))
            if not found:
                raise ValueError(f"data: folder {src!r} holds no file")
            paths.extend((p, _relative(p, Path(src))) for p in found)
        elif os.path.isfile(src):
            paths.append((Path(src), Path(src).name))
        else:
            raise ValueError(f"data: {src!r} is not a file, folder or glob that exists")
    docs: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for p, name in paths:
        real = os.path.realpath(p)
        if real in seen:  # one file reached twice: through a link, a symlink loop or two sources
            continue
        seen.add(real)
        if p.suffix == ".parquet":
            docs.extend(_read_parquet(p, text_column, name))
        else:
            docs.append((name, _read(p)))
    return docs


def _folders(root: str, hidden: bool = True):
    """`root` and every folder below it, following symlinked folders but never into one
    already seen (by its real path): a link back up the tree is not a loop to walk."""
    seen: set[str] = set()
    for folder, dirs, _ in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if hidden or not d.startswith("."))
        yield folder


def _walk(root: Path) -> list[Path]:
    """Every file under `root`, each folder visited once (no loop is followed)."""
    return sorted(Path(folder) / f for folder in _folders(str(root))
                  for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f)))


def _glob(pattern: str) -> list[Path]:
    """The files a glob matches. `**` is expanded over `_folders` (each folder once), not by
    `glob`, which follows a symlink loop until the OS refuses (each file again at every
    level); after `**` the rest of the pattern matches inside each of those folders."""
    if "**" not in pattern:
        return sorted(Path(p) for p in glob.glob(pattern) if os.path.isfile(p))
    head, _, tail = pattern.partition("**")
    tail = tail.lstrip("/" + os.sep) or "*"
    tops = [h for h in glob.glob(head) if os.path.isdir(h)] if glob.has_magic(head) else [head or "."]
    found = {p for top in tops if os.path.isdir(top) for folder in _folders(top, hidden=False)
             for p in glob.glob(os.path.join(glob.escape(folder), tail)) if os.path.isfile(p)}
    return sorted(Path(p) for p in found)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def non_text_fraction(body: bytes) -> float:
    """The fraction of bytes that are control bytes (other than \t \n \f \r) or part of
    invalid UTF-8."""
    if not body:
        return 0.0
    b = np.frombuffer(body, dtype=np.uint8)
    control = int((((b < 32) & ~np.isin(b, (9, 10, 12, 13))) | (b == 127)).sum())
    invalid = body.decode("utf-8", errors="replace").count("\ufffd")
    return min(1.0, (control + invalid) / len(b))


def check_text(docs: list[tuple[str, bytes]]) -> float:
    total = sum(len(b) for _, b in docs)
    frac = sum(non_text_fraction(b) * len(b) for _, b in docs) / total
    if frac > MAX_NON_TEXT:
        raise ValueError(f"data: {frac:.0%} of the corpus's bytes are not text (binary files?); "
                         f"at most {MAX_NON_TEXT:.0%} is accepted")
    if frac > WARN_NON_TEXT:
        warnings.warn(f"data: {frac:.1%} of the corpus's bytes are not text", stacklevel=2)
    return frac


def unique_documents(docs: list[tuple[str, bytes]], warn: bool = True) -> tuple[list[tuple[str, bytes]], int]:
    """The documents with repeated content dropped (the first, in load order, is kept), and
    how many were dropped. Two copies of one text would otherwise land in different splits
    (their names differ), and validation would score text the model trained on."""
    seen: set[bytes] = set()
    kept = []
    for name, body in docs:
        digest = hashlib.sha256(body).digest()
        if digest not in seen:
            seen.add(digest)
            kept.append((name, body))
    if warn and len(kept) < len(docs):
        warnings.warn(f"data: {len(docs) - len(kept)} duplicate document(s) dropped before splitting "
                      "(the same bytes as an earlier one)", stacklevel=3)
    return kept, len(docs) - len(kept)


def _split_of(name: str) -> str:
    # ~90/5/5 by a hash of the name: stable when documents are added or removed
    bucket = int.from_bytes(hashlib.sha256(_key(name)).digest()[:4], "little") % 100
    return "val" if bucket < 5 else "calib" if bucket < 10 else "train"


def build_corpus(sources: tuple[str, ...] | list[str] = (), text_column: str = "text",
                 min_len: int = 2, max_bytes: int = 0) -> Corpus:
    """Load, hash and split. Refuses a corpus with a split shorter than `min_len` bytes."""
    docs, duplicates = unique_documents([(n, b) for n, b in load_documents(sources, text_column) if b],
                                        warn=bool(sources))
    if not docs:
        raise ValueError("data: the corpus holds no non-empty document")
    check_text(docs)
    if len(docs) < MIN_DOCS:
        docs = [(f"{n}#{i}", b[o:o + CHUNK_BYTES]) for n, b in docs for i, o in enumerate(range(0, len(b), CHUNK_BYTES))]
    if max_bytes:
        # cap by taking whole documents in name-hash order, so the cap is deterministic
        docs.sort(key=lambda d: hashlib.sha256(_key(d[0])).digest())
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
        h.update(_key(name) + b"\0" + hashlib.sha256(body).digest())
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
                  sha256=h.hexdigest(), n_docs={s: len(parts[s]) for s in SPLITS}, duplicates=duplicates)


def sample_batch(stream: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Random windows of `length` bytes from a split: (B, length) int64."""
    return windows(stream, sample_starts(len(stream), batch_size, length, generator), length)


def sample_starts(n: int, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Where `sample_batch`'s windows start in a split of n bytes: (B,) int64."""
    return torch.randint(0, n - length + 1, (batch_size,), generator=generator)


def windows(stream: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """The windows of `length` bytes at `starts` (B,): (B, length) int64."""
    return stream[starts[:, None] + torch.arange(length)].long()


def fixed_batches(stream: torch.Tensor, n_batches: int, batch_size: int, length: int) -> list[torch.Tensor]:
    """Evenly spaced, deterministic windows for evaluation: n_batches of (B, length)."""
    n = n_batches * batch_size
    span = len(stream) - length
    starts = torch.linspace(0, max(span, 0), n).long()
    idx = starts[:, None] + torch.arange(length)
    return list(stream[idx].long().split(batch_size))


def held_out_batches(stream: torch.Tensor, n_batches: int, batch_size: int, length: int,
                     first: int) -> list[torch.Tensor]:
    """`n_batches` evaluation batches whose first ones are a run's own: the `first` batches
    of `fixed_batches` (its config's eval_batches), cut to n_batches, or followed by
    n_batches - first more. The extra windows sit at the midpoints of equal cells of the
    stream, so a longer evaluation adds windows between the run's instead of moving them
    (evenly spaced windows for n_batches would share none but the first with the run's)."""
    own = fixed_batches(stream, first, batch_size, length)
    if n_batches <= first:
        return own[:n_batches]
    m = (n_batches - first) * batch_size
    span = max(len(stream) - length, 0)
    starts = ((torch.arange(m, dtype=torch.float64) + 0.5) * span / m).long()  # (m,) cell midpoints
    idx = starts[:, None] + torch.arange(length)  # (m, length)
    return own + list(stream[idx].long().split(batch_size))
