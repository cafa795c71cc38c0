"""The target LM and the DSpark parallel drafter, in one file.

- `TargetLM`: a byte-level causal transformer (V = 256, RoPE, pre-norm) with a KV cache.
  It returns logits, the hidden state after every layer (the drafter's context features)
  and the final normed hidden state (the backbone stage's h_k).
- `Drafter`: the DFlash-style parallel stage (paper section 2.2 and 3.1). Context features
  from chosen target layers are concatenated and projected (Eq 2) and injected as extra
  keys/values in every drafter layer (Eq 3). A block anchored at a reads target context
  strictly before a (kv < a) and its own K slots bidirectionally; blocks never see each
  other. Slot 0 holds the anchor's embedding, slots 1..K-1 a learned mask embedding; the
  embedding and LM head are the target's, frozen.

Letters: B batch, T sequence, A anchors (blocks) per sequence, K block slots, V vocab,
D model width, H heads, E head width (D / H), L layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import VOCAB_SIZE, Config


def sync(device) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously), so timings are real."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


_INV_FREQ: dict[tuple[int, torch.device], torch.Tensor] = {}


def _inv_freq(head_dim: int, device: torch.device) -> torch.Tensor:
    """The rotary frequencies (E/2,), computed once per width and device: decoding calls
    rope_angles several times per token, and these four small ops cost as much as the
    rotation itself on a small model."""
    freq = _INV_FREQ.get((head_dim, device))
    if freq is None:
        with torch.inference_mode(False):  # a cached tensor must stay usable outside inference mode
            freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
        _INV_FREQ[(head_dim, device)] = freq
    return freq


def rope_angles(pos: torch.Tensor, head_dim: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of the rotary angles at absolute positions pos (T,) or (B, T); shaped to
    broadcast against (B, H, T, E/2)."""
    angles = pos.to(torch.float32)[..., None] * _inv_freq(head_dim, pos.device)  # (T, E/2) or (B, T, E/2)
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, E/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def rope(x: torch.Tensor, rot) -> torch.Tensor:
    """Rotary position embedding of x (B, H, T, E) with rot = rope_angles(...) of its
    positions, computed once per forward and cast to x's dtype (autocast may make it bf16)."""
    cos, sin = rot
    return apply_rope(x, cos.to(x.dtype), sin.to(x.dtype))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class KVCache:
    """Per-layer keys/values of a batch, preallocated; `length` positions are filled.

    Rolling back after a rejected draft is `crop(n)`: positions >= n are simply overwritten
    by the next write.
    """

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, head_dim: int,
                 device, dtype):
        shape = (batch, n_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.length = 0
        self.max_len = max_len

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store one layer's keys and values (B, H, T, E) for the T positions after the
        `length` filled ones, and return that layer's keys and values up to them
        (B, H, length+T, E). Advancing `length` is the caller's: a forward pass writes
        every layer first, and a drafted block is scratch that the next write overwrites."""
        L, T = self.length, k.shape[2]
        self.k[layer][:, :, L:L + T] = k.to(self.k[layer].dtype)
        self.v[layer][:, :, L:L + T] = v.to(self.v[layer].dtype)
        return self.k[layer][:, :, :L + T], self.v[layer][:, :, :L + T]

    def crop(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ValueError(f"crop: {n} outside 0..{self.length}")
        self.length = n


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.H = n_heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x, rot, cache: KVCache | None = None, layer: int = 0, mask=None):
        """rot: (cos, sin) of this call's positions; mask: which cached keys each query
        sees (None: all of them, or causal without a cache)."""
        B, T, D = x.shape  # batch, sequence, width
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.H, D // self.H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, E)
        q, k = apply_rope(q, *rot), apply_rope(k, *rot)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            kk, vv = cache.write(layer, k, v)  # (B, H, L+T, E)
            y = F.scaled_dot_product_attention(q, kk.to(q.dtype), vv.to(q.dtype), attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.attn = CausalSelfAttention(d, n_heads)
        self.mlp = MLP(d)

    def forward(self, x, rot, cache=None, layer=0, mask=None):
        x = x + self.attn(self.norm1(x), rot, cache, layer, mask)
        return x + self.mlp(self.norm2(x))


@dataclass
class TargetOutput:
    logits: torch.Tensor  # (B, T, V)
    layer_hidden: list[torch.Tensor]  # L x (B, T, D), the output of every layer
    hidden: torch.Tensor  # (B, T, D), final normed hidden (what the LM head reads)


class TargetLM(nn.Module):
    def __init__(self, d_model: int, n_layers: int, n_heads: int, seq_len: int):
        super().__init__()
        self.d_model, self.n_layers, self.n_heads, self.seq_len = d_model, n_layers, n_heads, seq_len
        self.wte = nn.Embedding(VOCAB_SIZE, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, VOCAB_SIZE, bias=False)
        self.apply(_init_weights)

    @classmethod
    def from_config(cls, cfg: Config) -> "TargetLM":
        return cls(cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.seq_len)

    def arch(self) -> dict:
        return dict(d_model=self.d_model, n_layers=self.n_layers, n_heads=self.n_heads, seq_len=self.seq_len)

    def new_cache(self, batch: int, max_len: int, device=None, dtype=None) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.n_layers, batch, self.n_heads, max_len, self.d_model // self.n_heads,
                       device or p.device, dtype or p.dtype)

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> TargetOutput:
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        pos = torch.arange(start, start + T, device=idx.device)
        x = self.wte(idx)  # (B, T, D)
        rot = rope_angles(pos, self.d_model // self.n_heads, x.dtype)
        mask = None  # one query sees every cached key: no mask needed
        if cache is not None:
            if start + T > cache.max_len:
                raise ValueError(f"KV cache full: {start} + {T} > {cache.max_len}")
            if T > 1:  # query i sits at absolute position start+i and sees keys 0..start+i
                mask = torch.arange(start + T, device=idx.device)[None, :] <= pos[:, None]
        layer_hidden = []
        for i, block in enumerate(self.blocks):
            x = block(x, rot, cache, i, mask)
            layer_hidden.append(x)
        if cache is not None:
            cache.length += T
        h = self.norm(x)
        return TargetOutput(self.lm_head(h), layer_hidden, h)


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


class DrafterLayer(nn.Module):
    """Pre-norm block whose attention reads [context ; block] keys/values (Eq 3)."""

    def __init__(self, d: int, n_heads: int):
        super().__init__()
        self.H = n_heads
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
        self.q = nn.Linear(d, d, bias=False)
        self.kv = nn.Linear(d, 2 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.mlp = MLP(d)

    def context_kv(self, ctx: torch.Tensor, rot):
        """W_K H_ctx, W_V H_ctx with RoPE at the context positions (rot: their cos, sin):
        2 x (B, H, T, E)."""
        B, T, D = ctx.shape
        k, v = self.kv(ctx).split(D, dim=-1)
        k, v = (t.view(B, T, self.H, D // self.H).transpose(1, 2) for t in (k, v))
        return rope(k, rot), v

    def _block_qkv(self, x, rot):
        """Queries, keys and values of the block slots x (B, Q, D): 3 x (B, H, Q, E)."""
        B, Q, D = x.shape  # Q = A*K block slots
        hn = self.norm1(x)
        q = self.q(hn).view(B, Q, self.H, D // self.H).transpose(1, 2)  # (B, H, Q, E)
        k, v = self.kv(hn).split(D, dim=-1)
        k, v = (t.view(B, Q, self.H, D // self.H).transpose(1, 2) for t in (k, v))
        return rope(q, rot), rope(k, rot), v

    def _finish(self, x, y):
        B, Q, D = x.shape
        x = x + self.proj(y.transpose(1, 2).reshape(B, Q, D))
        return x + self.mlp(self.norm2(x))

    def forward(self, x, rot, ctx_k, ctx_v, mask):
        """Training: x (B, Q, D) block slots, rot the cos, sin of their positions."""
        q, k, v = self._block_qkv(x, rot)
        kk = torch.cat([ctx_k.to(k.dtype), k], dim=2)  # (B, H, Tc+Q, E)
        vv = torch.cat([ctx_v.to(v.dtype), v], dim=2)
        return self._finish(x, F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask))

    def decode(self, x, rot, cache: KVCache, layer: int):
        """Inference, one block (batch 1) that sees all cached context and itself: its keys
        and values are written just past the context's end, where the next extension
        overwrites them, so attention reads one slice rather than a fresh concatenation."""
        q, k, v = self._block_qkv(x, rot)
        kk, vv = cache.write(layer, k, v)  # (1, H, L+Q, E)
        return self._finish(x, F.scaled_dot_product_attention(q, kk.to(q.dtype), vv.to(q.dtype)))


# At inference the drafter reads target context strictly before the anchor, so after
# every verification pass the committed positions' projected context keys/values are
# appended to a KVCache (one per drafter layer, batch 1) and a rejected suffix is cropped
# away, rather than recomputed.


class Drafter(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_layers: int, context_layers: tuple[int, ...],
                 block_size: int):
        super().__init__()
        self.context_layers = tuple(context_layers)
        self.K = block_size
        self.n_heads = n_heads
        m = len(context_layers)
        self.ctx_proj = nn.Linear(m * d_model, d_model, bias=False)  # W_c, Eq 2
        self.ctx_norm = nn.RMSNorm(d_model)
        self.mask_emb = nn.Parameter(torch.randn(d_model) * 0.02)
        self.layers = nn.ModuleList(DrafterLayer(d_model, n_heads) for _ in range(n_layers))
        self.norm = nn.RMSNorm(d_model)
        self.apply(_init_weights)

    def context(self, layer_hidden: list[torch.Tensor]) -> torch.Tensor:
        """H_ctx = RMSNorm(W_c [H(l1); ...; H(lm)]) (Eq 2): (B, T, D)."""
        feats = torch.cat([layer_hidden[i] for i in self.context_layers], dim=-1)  # (B, T, m*D)
        return self.ctx_norm(self.ctx_proj(feats))

    def block_inputs(self, anchor_emb: torch.Tensor) -> torch.Tensor:
        """Anchor embedding at slot 0, mask embedding at slots 1..K-1: (B, A, K, D)."""
        B, A, D = anchor_emb.shape
        masks = self.mask_emb.to(anchor_emb.dtype).expand(B, A, self.K - 1, D)
        return torch.cat([anchor_emb[:, :, None], masks], dim=2)

    def forward(self, ctx: torch.Tensor, anchor_emb: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """Training pass over A blocks per sequence.

        ctx (B, T, D) context features; anchor_emb (B, A, D); anchors (B, A) positions.
        Returns h (B, A, K, D).
        """
        B, T, D = ctx.shape
        A, K = anchors.shape[1], self.K
        x = self.block_inputs(anchor_emb).reshape(B, A * K, D)  # (B, A*K, D)
        qpos = (anchors[:, :, None] + torch.arange(K, device=ctx.device)).reshape(B, A * K)
        ctx_pos = torch.arange(T, device=ctx.device)
        slot_anchor = anchors.repeat_interleave(K, dim=1)  # (B, A*K)
        see_ctx = ctx_pos[None, None, :] < slot_anchor[:, :, None]  # (B, A*K, T): kv < a
        block_id = torch.arange(A, device=ctx.device).repeat_interleave(K)
        see_block = (block_id[:, None] == block_id[None, :]).expand(B, A * K, A * K)
        mask = torch.cat([see_ctx, see_block], dim=2)[:, None]  # (B, 1, A*K, T+A*K)
        E = D // self.n_heads
        rot, ctx_rot = rope_angles(qpos, E, x.dtype), rope_angles(ctx_pos, E, ctx.dtype)
        for layer in self.layers:
            ck, cv = layer.context_kv(ctx, ctx_rot)
            x = layer(x, rot, ck, cv, mask)
        return self.norm(x).view(B, A, K, D)

    # ---- inference: one block at a time, batch 1, context extended incrementally ----
    def new_context_cache(self, max_len: int) -> KVCache:
        p = self.ctx_proj.weight
        D = p.shape[0]
        return KVCache(len(self.layers), 1, self.n_heads, max_len, D // self.n_heads, p.device, p.dtype)

    def extend_context(self, cache: KVCache, layer_hidden: list[torch.Tensor]) -> None:
        """Append the context features of the next target positions (batch 1)."""
        ctx = self.context(layer_hidden)  # (1, T, D)
        T = ctx.shape[1]
        L = cache.length
        if L + T > cache.max_len:
            raise ValueError(f"drafter context cache full: {L} + {T} > {cache.max_len}")
        rot = rope_angles(torch.arange(L, L + T, device=ctx.device), ctx.shape[-1] // self.n_heads, ctx.dtype)
        for i, layer in enumerate(self.layers):
            cache.write(i, *layer.context_kv(ctx, rot))
        cache.length = L + T

    def draft_hidden(self, cache: KVCache, anchor_emb: torch.Tensor, anchor_pos: int) -> torch.Tensor:
        """One block from cached context (positions < anchor_pos): h (1, K, D)."""
        if cache.length != anchor_pos:
            raise ValueError(f"drafter context holds {cache.length} positions; the anchor is at {anchor_pos}")
        K = self.K
        if anchor_pos + K > cache.max_len:
            raise ValueError(f"drafter context cache full: {anchor_pos} + {K} > {cache.max_len}")
        x = self.block_inputs(anchor_emb.view(1, 1, -1)).view(1, K, -1)  # (1, K, D)
        rot = rope_angles(torch.arange(anchor_pos, anchor_pos + K, device=x.device), x.shape[-1] // self.n_heads,
                          x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer.decode(x, rot, cache, i)
        return self.norm(x)
