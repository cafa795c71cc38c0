"""A Hugging Face causal LM behind the target interface the drafter reads (`model.TargetLM`).

`HFTarget(model, layer_ids)` wraps any `transformers` causal LM whose decoder layers sit at
`model.model.layers` (Llama, Qwen2/3, Mistral, Gemma, ...). A forward gives `TargetOutput`:

- `logits` (B, T, V), the model's own;
- `layer_hidden`, by layer index as `TargetLM` gives it: the outputs of the decoder layers at
  `layer_ids` (None at the others), read by forward hooks as
  DeepSpec and DFlash read them (ids spread over the depth, e.g. [1, 9, 17, 25, 33] of 36);
  the last layer is refused, since what a user would reach for as its state,
  `hidden_states[-1]`, is the normed state and not the layer's output;
- `hidden`, the final normed state (what the LM head reads), from a hook on the final norm.

Its cache (`HFCache`) is the model's own `DynamicCache`, with the `length`, `max_len` and
`crop(n)` that speculative decoding uses to roll the target back after a rejection. `wte`
and `lm_head` are the model's embedding and LM head, shared with the drafter as DeepSpec
shares them.

Where a target comes from (`load_target_model`): a local `from_pretrained` directory (the
user's own weights; nothing is downloaded), or a config built in code (`BUILT`: Qwen3
and Llama with a 256-token vocabulary, so the byte corpus needs no tokenizer). Both are
checked before any work, in one line each. `transformers` is an optional dependency (the
`hf` extra): nothing here is imported by the byte-LM path.

Letters: B batch, T new tokens, L cached tokens, V vocabulary, D the target's width.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from .config import BUILT_TARGETS, VOCAB_SIZE
from .model import TargetOutput

# configs built in code, with a 256-token vocabulary (bytes): the tiny ones train on a CPU, the
# 0.6B-shaped one (Qwen3-0.6B's width, depth and heads) on a lent GPU; their width and depth are
# BUILT_TARGETS' (which the config checks without transformers)
BUILT = {
    "qwen3-tiny": ("Qwen3Config", dict(intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                                       head_dim=16)),
    "llama-tiny": ("LlamaConfig", dict(intermediate_size=128, num_attention_heads=4, num_key_value_heads=2)),
    "qwen3-0.6b-shape": ("Qwen3Config", dict(intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8,
                                             head_dim=128)),
}


class HFTargetError(ValueError):
    """A target that cannot serve the drafter, in one line."""


def _transformers():
    try:
        import transformers
    except ImportError:
        raise HFTargetError("an HF target needs transformers: pip install -e '.[hf]'") from None
    return transformers


def built_config(name: str, seq_len: int = 512):
    """The transformers config of one of the BUILT targets (no weights)."""
    if name not in BUILT:
        raise HFTargetError(f"hf target {name!r}: not a config built in code ({', '.join(BUILT)}) and not a directory")
    kind, sizes = BUILT[name]
    hidden, layers = BUILT_TARGETS[name]
    return getattr(_transformers(), kind)(vocab_size=VOCAB_SIZE, hidden_size=hidden, num_hidden_layers=layers,
                                          max_position_embeddings=seq_len, tie_word_embeddings=False,
                                          attn_implementation="eager", **sizes)


def built_model(name: str, seq_len: int = 512, seed: int = 0) -> nn.Module:
    """A causal LM built from one of the BUILT configs, its weights initialised from `seed`."""
    config = built_config(name, seq_len)
    torch.manual_seed(seed)
    return _transformers().AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def load_target_model(source: str, seq_len: int = 512, seed: int = 0) -> nn.Module:
    """The causal LM `source` names: a BUILT config's name, or a local `from_pretrained`
    directory (read offline). HFTargetError, in one line, for a missing directory, a model
    that is not a causal LM, or a vocabulary the byte corpus cannot be encoded in."""
    if source in BUILT:
        model = built_model(source, seq_len, seed)
    else:
        path = Path(source)
        if not (path / "config.json").is_file():
            raise HFTargetError(f"hf target {source!r}: no such model directory (a local from_pretrained folder "
                                f"with config.json, or one of {', '.join(BUILT)})")
        tf = _transformers()
        try:
            config = tf.AutoConfig.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError) as e:
            raise HFTargetError(f"hf target {source!r}: its config.json cannot be read "
                                f"({str(e).splitlines()[0][:160]})") from None
        if type(config) not in tf.MODEL_FOR_CAUSAL_LM_MAPPING:
            raise HFTargetError(f"hf target {source!r}: a {type(config).__name__} is not a causal LM")
        model = tf.AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    vocab = model.get_output_embeddings().weight.shape[0]
    if vocab < VOCAB_SIZE:
        raise HFTargetError(f"hf target {source!r}: a vocabulary of {vocab} tokens cannot encode the byte corpus "
                            f"({VOCAB_SIZE} byte values)")
    return model


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (`model.model.layers`); HFTargetError where it has none."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise HFTargetError(f"{type(model).__name__}: no decoder layers at model.model.layers")
    return layers


def check_layer_ids(layer_ids, n_layers: int) -> tuple[int, ...]:
    """Hooked layer ids: distinct integers in [0, n_layers - 1), increasing."""
    ids = tuple(layer_ids)
    if not ids or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise HFTargetError(f"layer ids: a list of layer indices, got {list(ids)!r}")
    if list(ids) != sorted(set(ids)) or ids[0] < 0:
        raise HFTargetError(f"layer ids: distinct, increasing and >= 0, got {list(ids)!r}")
    if ids[-1] >= n_layers - 1:
        raise HFTargetError(f"layer ids: {ids[-1]} is not below the final layer {n_layers - 1} of {n_layers}: the "
                            "final layer's hidden_states[-1] is the normed state, not its output")
    return ids


def spread_layer_ids(n_layers: int, k: int) -> tuple[int, ...]:
    """k layer ids spread over the depth below the final layer, from layer 1, as DeepSpec
    chooses them (36 layers, k 5: 1, 9, 17, 25, 33)."""
    if not 1 <= k <= n_layers - 2:
        raise HFTargetError(f"{k} hooked layers do not fit in layers 1..{n_layers - 2} of {n_layers}")
    step = (n_layers - 3) // max(k - 1, 1) if k > 1 else 0
    return tuple(1 + step * i for i in range(k))


def rebuild(arch: dict) -> "HFTarget":
    """An HFTarget from its `arch()` (a saved target's), its weights to be loaded after."""
    return HFTarget(load_target_model(arch["hf"], int(arch["seq_len"])), arch["layer_ids"], arch["hf"],
                    int(arch["seq_len"]))


def is_given(source: str) -> bool:
    """Whether a target_model is a user's own weights (a directory), used as given rather than
    trained by the target stage as a built config is."""
    return bool(source) and source not in BUILT_TARGETS


class HFCache:
    """The target's KV cache for speculative decoding: the model's DynamicCache, its length,
    and `crop(n)` to keep the first n positions after a rejection."""

    def __init__(self, dynamic, max_len: int):
        self.dynamic, self.max_len = dynamic, max_len

    @property
    def length(self) -> int:
        return int(self.dynamic.get_seq_length())

    def crop(self, n: int) -> None:
        self.dynamic.crop(n)


class HFTarget(nn.Module):
    """A transformers causal LM as the drafter's target (module docstring)."""

    def __init__(self, model: nn.Module, layer_ids, source: str = "", seq_len: int = 512):
        super().__init__()
        self.model, self.source, self.seq_len = model, source, seq_len
        layers = decoder_layers(model)
        self.n_layers = len(layers)
        self.layer_ids = check_layer_ids(layer_ids, self.n_layers)
        self.wte, self.lm_head = model.get_input_embeddings(), model.get_output_embeddings()
        self.d_model = self.wte.weight.shape[1]
        self._seen: dict[str, torch.Tensor] = {}
        for i in self.layer_ids:
            layers[i].register_forward_hook(self._keeper(f"layer{i}"))
        model.model.norm.register_forward_hook(self._keeper("norm"))

    def _keeper(self, name: str):
        def keep(module, args, output):
            self._seen[name] = output[0] if isinstance(output, tuple) else output  # (B, T, D)
        return keep

    @classmethod
    def from_config(cls, cfg) -> "HFTarget":
        """The target a `Config` names (`target_model`), hooked at its context layers."""
        model = load_target_model(cfg.target_model, cfg.seq_len, cfg.target_seed)
        return cls(model, cfg.context_layers, cfg.target_model, cfg.seq_len)

    def arch(self) -> dict:
        """What rebuilds it (`rebuild`) and what a shared target is compared by."""
        return {"hf": self.source, "seq_len": self.seq_len, "layer_ids": list(self.layer_ids),
                **{k: int(getattr(self.model.config, k)) for k in ("hidden_size", "num_hidden_layers", "vocab_size")}}

    def new_cache(self, batch: int, max_len: int, device=None, dtype=None) -> HFCache:
        return HFCache(_transformers().DynamicCache(), max_len)

    def forward(self, idx: torch.Tensor, cache: HFCache | None = None) -> TargetOutput:
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if cache is not None and start + T > cache.max_len:
            raise ValueError(f"KV cache full: {start} + {T} > {cache.max_len}")
        self._seen.clear()
        out = self.model(input_ids=idx, past_key_values=cache.dynamic if cache is not None else None,
                         use_cache=cache is not None)
        # indexed by layer as TargetLM's is, so that the drafter's context_layers pick the same way;
        # None at a layer not hooked (the drafter reads only its context layers, the hooked ones)
        layer_hidden = [self._seen.get(f"layer{i}") for i in range(self.n_layers)]  # n_layers x (B, T, D) | None
        return TargetOutput(out.logits, layer_hidden, self._seen["norm"])  # (B, T, V), ..., (B, T, D)
