"""The one typed config of a DSpark run, its named presets, and parsing of overrides.

Every field is a knob with one name end to end: the CLI flag (`--set name=value`), the
config field, the Ray Tune param, the MLflow param and the analysis column.
`Config.__post_init__` refuses nonsense with a one-line `ValueError` naming the field and
what it allows, before any work starts.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .curves import parse_curve

VOCAB_SIZE = 256  # byte-level: V is a constant, not a knob

WINDOWS = ("aligned", "shifted", "ids_only")
HEADS = ("markov", "rnn", "none")
CONFIDENCE_INPUTS = ("hidden", "hidden+markov")
PARALLEL_STAGES = ("drafter", "backbone")
ANCHORS = ("random", "strided")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")

# What each field is for, declared beside it (`knob`); everything that sorts fields by role
# (the shared target's address, resume refusal, the dead-factor check, smoke tests) reads it:
#   target      shapes the target LM (and, where the draft stage uses it too, the draft)
#   objective   shapes what the draft stage trains, not the target
#   evaluation  what is measured and how, never what trains
#   plumbing    where and how a run executes; never changes a result
ROLES = ("target", "objective", "evaluation", "plumbing")
_MISSING = object()


def knob(role: str, default: Any, smoke: Any = _MISSING):
    """A config field with its role and, where a smoke test shrinks it, its smoke value."""
    if role not in ROLES:
        raise ValueError(f"knob: role {role!r} is not one of {', '.join(ROLES)}")
    meta = {"role": role} if smoke is _MISSING else {"role": role, "smoke": smoke}
    return dataclasses.field(default=default, metadata=meta)


# the HF targets built in code (dspark/hf_target.py): name -> (hidden size, layers). The tiny
# ones train on a CPU; qwen3-0.6b-shape has Qwen3-0.6B's width and depth (a lent GPU's study)
BUILT_TARGETS = {"qwen3-tiny": (64, 4), "llama-tiny": (64, 4), "qwen3-0.6b-shape": (1024, 28)}


def hf_target_shape(source: str) -> tuple[int, int]:
    """(hidden size, layers) of an HF target: a built config's, or a local directory's
    config.json; ValueError in one line where it has none."""
    if source in BUILT_TARGETS:
        return BUILT_TARGETS[source]
    path = Path(source) / "config.json"
    try:
        given = json.loads(path.read_text())
        return int(given["hidden_size"]), int(given["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"target_model: {source!r} is neither an HF config built in code ({', '.join(BUILT_TARGETS)}) nor a "
                         "local from_pretrained directory whose config.json gives hidden_size and num_hidden_layers"
                         ) from None


@dataclass
class Config:
    """Defaults are the `tiny` preset; build runs with `from_dict({'preset': ...})`."""

    preset: str = knob('plumbing', "tiny")
    # --- target LM ---
    d_model: int = knob('target', 64)
    n_layers: int = knob('target', 2)
    n_heads: int = knob('target', 4)
    seq_len: int = knob('target', 128)
    # --- parallel stage ---
    parallel_stage: str = knob('objective', "drafter")
    drafter_layers: int = knob('objective', 1)
    # target layers whose hidden states feed the drafter (Eq 2); -1 is the last layer
    context_layers: tuple[int, ...] = knob('objective', (0, -1))
    aux_weight: float = knob('objective', 0.1)  # backbone stage only: L = CE_lm + aux_weight * L_dspark
    # --- sequential stage, confidence head, loss ---
    head: str = knob('objective', "markov")
    markov_rank: int = knob('objective', 32)
    confidence_input: str = knob('objective', "hidden+markov")  # D9
    block_size: int = knob('objective', 7)  # K, the paper's gamma
    window: str = knob('objective', "aligned")  # D1
    decay_gamma: float | str = knob('objective', "block")  # D2: a number, or "block" = block_size
    anchors: str = knob('objective', "random")
    stride: int = knob('objective', 16)  # anchor spacing when anchors = strided
    anchors_per_seq: int = knob('objective', 8)  # anchors drawn per sequence when anchors = random
    alpha_ce: float = knob('objective', 0.1)
    alpha_tv: float = knob('objective', 0.9)
    alpha_conf: float = knob('objective', 1.0)
    # --- optimisation ---
    batch_size: int = knob('target', 8)
    target_steps: int = knob('target', 150, smoke=8)
    draft_steps: int = knob('objective', 150, smoke=6)
    target_lr: float = knob('target', 3e-3)
    lr: float = knob('objective', 3e-3)
    weight_decay: float = knob('target', 0.01)
    warmup_steps: int = knob('target', 20)
    grad_clip: float = knob('target', 1.0)
    seed: int = knob('objective', 0)  # the draft stage's seed (a sweep's replicate)
    target_seed: int = knob('target', 0)  # the target stage's own seed, so replicates can share one target
    precision: str = knob('target', "fp32")
    device: str = knob('plumbing', "auto")
    # --- data ---
    data: tuple[str, ...] = knob('target', ())  # files, folders, globs or parquet; empty = Python stdlib
    text_column: str = knob('target', "text")
    max_corpus_bytes: int = knob('target', 4_000_000, smoke=300000)  # 0 = no cap
    # --- evaluation ---
    eval_interval: int = knob('evaluation', 50, smoke=3)
    eval_batches: int = knob('evaluation', 2, smoke=1)
    spec_prompts: int = knob('evaluation', 4, smoke=2)  # speculative decoding prompts (0 = skip)
    spec_prompt_len: int = knob('evaluation', 32, smoke=16)
    spec_new_tokens: int = knob('evaluation', 48, smoke=16)
    spec_interval_prompts: int = knob('evaluation', 0, smoke=0)  # prompts for speculative eval at eval intervals (0 = end only)
    # the capacity curve SPS(B) Algorithm 1 is replayed on (dspark.curves): measured,
    # roofline:<accelerator>:<size> (a model) or table:<path>
    sched_curve: str = knob('evaluation', "measured")
    # --- run plumbing ---
    # the target: "" is the byte LM above; a built HF config's name (BUILT_TARGETS) or a local
    # from_pretrained directory is a Hugging Face causal LM (dspark/hf_target.py), whose width
    # and depth d_model and n_layers must state
    target_model: str = knob('target', "")
    checkpoint_every_s: float = knob('plumbing', 0.0)  # seconds between checkpoints at evals (0: every eval); a stage's end always writes one
    target_path: str = knob('plumbing', "")  # load a trained target instead of training one
    # a folder keeping the frozen target's features of each drafter-stage batch (safetensors,
    # dspark/feature_cache.py), shared by the arms that draw the same batches; "" computes them
    # online. Changes no result: for targets whose forward outweighs the drafter's step
    feature_cache: str = knob('plumbing', "")
    out_dir: str = knob('plumbing', "runs/dspark")  # `dspark train` without it: a new runs/<preset>-<date>-<time>

    def __post_init__(self) -> None:
        self.context_layers = tuple(int(i) for i in self.context_layers)
        if isinstance(self.data, str):
            self.data = (self.data,) if self.data else ()
        self.data = tuple(str(p) for p in self.data)
        if isinstance(self.decay_gamma, str) and self.decay_gamma != "block":
            try:
                self.decay_gamma = float(self.decay_gamma)
            except ValueError:
                raise ValueError(
                    f"decay_gamma: {self.decay_gamma!r} is neither a positive number nor 'block'"
                ) from None
        if isinstance(self.decay_gamma, int) and not isinstance(self.decay_gamma, bool):
            self.decay_gamma = float(self.decay_gamma)
        self._validate()

    def _validate(self) -> None:
        for f in fields(self):  # inf and nan pass every "> 0" check below: refuse them first
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name}: must be a finite number, got {value!r}")
        for name, allowed in (
            ("window", WINDOWS),
            ("head", HEADS),
            ("confidence_input", CONFIDENCE_INPUTS),
            ("parallel_stage", PARALLEL_STAGES),
            ("anchors", ANCHORS),
            ("precision", PRECISIONS),
            ("device", DEVICES),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"{name}: unknown level {value!r}; allowed: {', '.join(allowed)}")
        if self.preset not in PRESETS:
            raise ValueError(f"preset: unknown preset {self.preset!r}; allowed: {', '.join(PRESETS)}")
        positive = ("d_model", "n_layers", "n_heads", "seq_len", "block_size", "stride",
                    "anchors_per_seq", "batch_size", "markov_rank", "drafter_layers",
                    "eval_interval", "eval_batches")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        for name in ("target_steps", "draft_steps", "warmup_steps", "spec_prompts",
                     "spec_interval_prompts", "max_corpus_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        parse_curve(self.sched_curve)  # a one-line ValueError naming sched_curve
        if self.feature_cache and self.parallel_stage != "drafter":
            raise ValueError("feature_cache: keeps a frozen target's features, the drafter stage's "
                             "(parallel_stage: drafter)")
        if self.feature_cache and Path(self.feature_cache).exists() and not Path(self.feature_cache).is_dir():
            raise ValueError(f"feature_cache: {self.feature_cache} is not a folder")
        self._validate_shapes()

    def _validate_shapes(self) -> None:
        """The relations between fields: head widths, the block in the sequence, the layers."""
        if self.spec_prompts and (self.spec_prompt_len < 1 or self.spec_new_tokens < 1):
            raise ValueError("spec_prompt_len/spec_new_tokens: must be >= 1 when spec_prompts > 0")
        if self.decay_gamma != "block" and not (isinstance(self.decay_gamma, float) and self.decay_gamma > 0):
            raise ValueError(f"decay_gamma: must be a number > 0 or 'block', got {self.decay_gamma!r}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model: {self.d_model} must split into n_heads={self.n_heads} heads of even width")
        if self.block_size + 2 > self.seq_len:
            raise ValueError(f"block_size: {self.block_size} leaves no room in seq_len={self.seq_len}")
        if self.confidence_input == "hidden+markov" and self.head == "none":
            raise ValueError("confidence_input: 'hidden+markov' needs a sequential head (head is 'none'); use 'hidden'")
        if self.target_model:  # first: its shape is the model's, which the checks below read
            self._check_hf_target()
        for i in self.context_layers:
            if not -self.n_layers <= i < self.n_layers:
                raise ValueError(f"context_layers: layer {i} does not exist in a {self.n_layers}-layer target")
        if not self.context_layers:
            raise ValueError("context_layers: at least one target layer is needed")
        for name in ("lr", "target_lr", "grad_clip"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("aux_weight", "weight_decay", "alpha_ce", "alpha_tv", "alpha_conf", "checkpoint_every_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.spec_prompts and self.spec_prompt_len + self.spec_new_tokens + self.block_size + 1 > self.seq_len:
            raise ValueError(
                f"spec_prompt_len: prompt {self.spec_prompt_len} + new tokens {self.spec_new_tokens} "
                f"+ block {self.block_size} exceeds seq_len={self.seq_len}"
            )

    # ---- derived ----
    @property
    def decay_denominator(self) -> float:
        """The position-decay denominator actually used (D2): w_k = exp(-(k-1)/this).
        Not the paper's gamma, which is the block size."""
        return float(self.block_size) if self.decay_gamma == "block" else float(self.decay_gamma)

    def objective_dict(self) -> dict[str, Any]:
        """What a run's results depend on: every field but the plumbing, each replaced by
        the value it resolves to. Two configs with equal objective dicts train and measure
        the same thing, so a sweep factor whose levels give equal ones is dead (e.g.
        `decay_gamma: 4.0` against `block` at block_size 4, or levels that differ only in
        `out_dir`)."""
        d = {k: v for k, v in self.to_dict().items() if role_of(k) != "plumbing"}
        d["decay_gamma"] = self.decay_denominator
        if self.parallel_stage == "drafter":
            d.pop("aux_weight")  # backbone stage only
        if self.anchors == "strided":
            d.pop("anchors_per_seq")
        return d

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["context_layers"] = list(self.context_layers)
        d["data"] = list(self.data)
        return d

    def _check_hf_target(self) -> None:
        """An HF target's width and depth are the model's (read from its config.json, no
        weights): d_model and n_layers must state them, and its context layers are hooked
        decoder layers below the final one (dspark/hf_target.py)."""
        hidden, layers = hf_target_shape(self.target_model)
        if (self.d_model, self.n_layers) != (hidden, layers):
            raise ValueError(f"target_model: {self.target_model} is {hidden} wide and {layers} layers deep; set "
                             f"d_model={hidden} and n_layers={layers} (got {self.d_model} and {self.n_layers})")
        if any(not 0 <= i < layers - 1 for i in self.context_layers):
            raise ValueError(f"context_layers: an HF target's are decoder layers 0..{layers - 2} (not the final "
                             f"layer, whose hidden_states[-1] is the normed state), got {list(self.context_layers)}")
        if self.parallel_stage != "drafter":
            raise ValueError("target_model: an HF target serves the drafter stage (parallel_stage: drafter)")

    def target_dict(self) -> dict[str, Any]:
        """The fields that determine the target LM (what a shared target is addressed by)."""
        d = self.to_dict()
        # target_model only where set: the byte LM's targets keep the address they always had
        return {k: d[k] for k in with_role("target") if k != "target_model" or self.target_model}

    def replace(self, **overrides: Any) -> "Config":
        return from_dict({**self.to_dict(), **overrides})


# Named presets: `tiny` for tests (seconds on CPU), `small` the CPU demo (minutes),
# `base` for a GPU.
PRESETS: dict[str, dict[str, Any]] = {
    # the field defaults (seconds on a CPU), read off the dataclass rather than written twice
    "tiny": {k: getattr(Config, k) for k in ("d_model", "n_layers", "n_heads", "seq_len", "markov_rank",
                                             "batch_size", "target_steps", "draft_steps", "precision")},
    # bf16 autocast is ~10x slower than fp32 on CPUs without bf16 matmul units (this
    # project's 2-core AMD EPYC runners among them), so the CPU presets train in fp32
    "small": dict(d_model=256, n_layers=4, n_heads=4, seq_len=256, markov_rank=64, batch_size=8,
                  target_steps=600, draft_steps=400, eval_interval=100, eval_batches=8, anchors_per_seq=32,
                  drafter_layers=1, context_layers=(1, 3), target_lr=2e-3, lr=2e-3, warmup_steps=50,
                  spec_prompts=64, spec_prompt_len=64, spec_new_tokens=160, precision="fp32",
                  max_corpus_bytes=0),
    "base": dict(d_model=512, n_layers=8, n_heads=8, seq_len=512, markov_rank=256, batch_size=32,
                 target_steps=6000, draft_steps=4000, eval_interval=500, eval_batches=16,
                 drafter_layers=3, context_layers=(1, 4, 7), target_lr=1e-3, lr=1e-3,
                 warmup_steps=200, anchors_per_seq=16, spec_prompts=128, spec_prompt_len=128,
                 spec_new_tokens=256, precision="bf16"),
}

FIELD_NAMES = tuple(f.name for f in fields(Config))


def roles(cls: type = Config) -> dict[str, str]:
    """field -> role of a config dataclass; a field declared without one is refused."""
    out = {}
    for f in fields(cls):
        role = f.metadata.get("role")
        if role not in ROLES:
            raise TypeError(f"{cls.__name__}.{f.name}: declare it with knob(ROLE, default); "
                            f"roles: {', '.join(ROLES)}")
        out[f.name] = role
    return out


_ROLES = roles()


def role_of(name: str) -> str:
    return _ROLES[name]


def with_role(*wanted: str) -> tuple[str, ...]:
    """The fields of the given roles, in declaration order."""
    return tuple(k for k, r in _ROLES.items() if r in wanted)


def smoke_overrides() -> dict[str, Any]:
    """What a smoke test sets: every field that declares a smoke value."""
    return {f.name: f.metadata["smoke"] for f in fields(Config) if "smoke" in f.metadata}


def _coerce(name: str, raw: Any) -> Any:
    """Turn a string (CLI `--set`, MLflow param) into the field's type."""
    if not isinstance(raw, str):
        return raw
    if name in ("context_layers", "data"):
        text = raw.strip()
        if text[:1] in "[(":
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise ValueError(f"{name}: cannot parse {raw!r} as a list") from None
            return tuple(value) if isinstance(value, (list, tuple)) else (value,)
        parts = [p for p in text.strip("()").split(",") if p.strip()]
        return tuple(int(p) for p in parts) if name == "context_layers" else tuple(p.strip() for p in parts)
    default = next(f.default for f in fields(Config) if f.name == name)
    if isinstance(default, bool):
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"{name}: expected true/false, got {raw!r}")
    try:
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a {type(default).__name__}, got {raw!r}") from None
    return raw


def from_dict(values: dict[str, Any]) -> Config:
    """Build a Config from a preset name plus overrides; unknown keys are refused."""
    unknown = sorted(set(values) - set(FIELD_NAMES))
    if unknown:
        raise ValueError(f"unknown config field(s): {', '.join(unknown)}")
    preset = values.get("preset", "tiny")
    if preset not in PRESETS:
        raise ValueError(f"preset: unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
    merged = {**PRESETS[preset], **{k: _coerce(k, v) for k, v in values.items()}}
    return Config(**merged)


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["window=shifted", "decay_gamma=4"]` -> dict; each must be key=value with a known key."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        key = key.strip()
        if key not in FIELD_NAMES:
            raise ValueError(f"--set {key}: unknown config field")
        out[key] = _coerce(key, value)
    return out
