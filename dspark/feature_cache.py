"""The frozen target's features kept on disk, for targets whose forward costs more than the
drafter's step (`feature_cache`: a folder; "" recomputes them online, as small targets do).

In the drafter stage every step runs the frozen target over its batch of windows and reads
its context layers' outputs and its final normed state (`TargetOutput`). The arms of a
replicate block share their seed, so they draw the same batches: the first arm to reach a
batch computes its features and writes them here, the others read them. A batch's features
are the same numbers online or cached (the same forward on the same windows, the logits the
target's LM head over the stored normed state), so the cache changes no result.

Layout, content-keyed: `<feature_cache>/<key>/manifest.json` says what the folder holds (the
target's architecture and a hash of its weights, the hooked layer ids, the corpus hash, the
window length and the batch size: `FeatureKey`), and each batch is one safetensors file,
`<starts digest>.safetensors`, holding its windows' tokens, the context layers' outputs and
the normed state, with the key's digest and its starts' digest in its metadata. Every read
checks the manifest against the run's key and the file's metadata and tokens against the
batch it stands for; a file that does not match is refused in one line naming it. Files are
written to a temporary name and renamed: a reader sees a whole file or none.

Letters: B batch, T window length - 1 (the positions the target reads), D the target's width.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .model import TargetOutput

FORMAT = "dspark-features/1"
MANIFEST = "manifest.json"


class FeatureCacheError(ValueError):
    """A feature cache that cannot be read or written, in one line."""


def weights_hash(module: torch.nn.Module) -> str:
    """A hash of a model's weights (every tensor of its state dict, by name, in order)."""
    h = hashlib.sha256()
    for name, t in module.state_dict().items():
        h.update(name.encode() + b"\0" + str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class FeatureKey:
    """What a cached batch's features depend on."""
    target: str  # the target's architecture (`arch()` or the config's target fields), as JSON
    weights: str  # weights_hash of the frozen target
    layers: int  # the target's depth (its layer_hidden's length)
    layer_ids: tuple[int, ...]  # the context layers whose outputs are kept, in 0..layers - 1
    corpus: str  # the corpus hash (its training split's windows are the batches)
    length: int  # window length: seq_len + 1
    batch: int  # windows per batch

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:32]


def starts_digest(starts: torch.Tensor) -> str:
    return hashlib.sha256(starts.to(torch.int64).cpu().numpy().tobytes()).hexdigest()[:32]


class FeatureCache:
    """One key's folder under a `feature_cache` root: `get` a batch's features, or None;
    `put` them."""

    def __init__(self, root: str | os.PathLike, key: FeatureKey):
        try:
            import safetensors.torch  # noqa: F401 (the `hf` extra)
        except ImportError:
            raise FeatureCacheError("feature_cache needs safetensors: pip install -e '.[hf]'") from None
        self.key, self.folder = key, Path(root) / key.digest()
        manifest = {"format": FORMAT, **asdict(key), "layer_ids": list(key.layer_ids)}
        path = self.folder / MANIFEST
        try:
            if path.exists():
                held = json.loads(path.read_text())
                if held != manifest:
                    what = [k for k in manifest if not isinstance(held, dict) or held.get(k) != manifest[k]]
                    raise FeatureCacheError(f"feature_cache: {path} is not this run's ({', '.join(what) or 'its form'} "
                                            "differ): not read")
            else:
                self.folder.mkdir(parents=True, exist_ok=True)
                _atomic(path, json.dumps(manifest, indent=1, sort_keys=True).encode())
        except (OSError, json.JSONDecodeError) as e:
            raise FeatureCacheError(f"feature_cache: {path}: {type(e).__name__}: {str(e)[:120]}") from None
        self.hits = self.misses = 0

    def _file(self, starts: torch.Tensor) -> Path:
        return self.folder / f"{starts_digest(starts)}.safetensors"

    def get(self, starts: torch.Tensor, x: torch.Tensor, lm_head: torch.nn.Module) -> TargetOutput | None:
        """The features of the batch of windows at `starts` (B,), whose tokens are x (B, T + 1),
        or None where they are not kept yet. The logits are `lm_head` over the normed state."""
        from safetensors import SafetensorError
        from safetensors.torch import safe_open

        path = self._file(starts)
        if not path.exists():
            self.misses += 1
            return None
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except (SafetensorError, OSError, ValueError) as e:
            raise FeatureCacheError(f"feature_cache: {path}: not a safetensors file ({str(e)[:80]}): not read") from None
        why = _mismatch(meta, tensors, self.key, starts, x)
        if why:
            raise FeatureCacheError(f"feature_cache: {path}: {why}: not read")
        device = lm_head.weight.device
        hidden = tensors["hidden"].to(device)  # (B, T, D)
        layers = [tensors[f"layer{i}"].to(device) if i in self.key.layer_ids else None
                  for i in range(self.key.layers)]  # layers x (B, T, D), indexed by layer; None where not kept
        self.hits += 1
        return TargetOutput(lm_head(hidden), layers, hidden)

    def put(self, starts: torch.Tensor, x: torch.Tensor, out: TargetOutput) -> None:
        """Keep a batch's features (`out`, the target's forward over x[:, :-1])."""
        from safetensors.torch import save

        tensors = {"tokens": x.detach().cpu().contiguous(), "hidden": out.hidden.detach().cpu().contiguous()}
        tensors.update({f"layer{i}": out.layer_hidden[i].detach().cpu().contiguous() for i in self.key.layer_ids})
        meta = {"format": FORMAT, "key": self.key.digest(), "starts": starts_digest(starts)}
        try:
            _atomic(self._file(starts), save(tensors, metadata=meta))
        except OSError as e:
            raise FeatureCacheError(f"feature_cache: {self.folder}: cannot write ({e.strerror or e})") from None


def _mismatch(meta: dict, tensors: dict, key: FeatureKey, starts: torch.Tensor, x: torch.Tensor) -> str:
    """Why a batch file is not the features of this batch under this key, or ""."""
    if meta.get("format") != FORMAT or meta.get("key") != key.digest():
        return "its metadata names another key"
    if meta.get("starts") != starts_digest(starts):
        return "it holds another batch"
    need = {"tokens", "hidden", *(f"layer{i}" for i in key.layer_ids)}
    if need - set(tensors):
        return f"it lacks {', '.join(sorted(need - set(tensors)))}"
    if not torch.equal(tensors["tokens"], x.detach().cpu()):
        return "its tokens are not the batch's windows"
    B, T = x.shape[0], x.shape[1] - 1
    for name in need - {"tokens"}:
        t = tensors[name]
        if t.dim() != 3 or tuple(t.shape[:2]) != (B, T) or not torch.isfinite(t).all():
            return f"{name} is not a finite (B, T, D) = ({B}, {T}, D) tensor"
    return ""


def _atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
