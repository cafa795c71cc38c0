"""Teacher-forced draft blocks for both parallel stages: one function, used by the
training step (in the run's window) and by the evaluator (always the aligned window).

Letters: B batch, T sequence (the LM consumes x[0..T-1]), A anchors, K slots, V vocab,
D width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .heads import DraftHead
from .model import Drafter, TargetLM, TargetOutput
from .windows import window_positions, window_valid


@dataclass
class Models:
    target: TargetLM
    head: DraftHead
    drafter: Drafter | None  # None in the backbone stage
    block_size: int


@dataclass
class BlockOut:
    draft_logits: torch.Tensor  # (B, A, K, V)
    conf_logits: torch.Tensor  # (B, A, K)
    target_logits: torch.Tensor  # (B, A, K, V), detached
    labels: torch.Tensor  # (B, A, K)
    valid: torch.Tensor  # (B, A, K) bool
    lm: TargetOutput


def gather_seq(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """x (B, T, ...) at positions pos (B, A, K) -> (B, A, K, ...); out-of-range positions
    are clamped (their slots are masked invalid)."""
    B, A, K = pos.shape
    flat = pos.clamp(0, x.shape[1] - 1).reshape(B, A * K)
    if x.dim() == 2:
        return x.gather(1, flat).view(B, A, K)
    idx = flat[:, :, None].expand(B, A * K, x.shape[-1])
    return x.gather(1, idx).view(B, A, K, x.shape[-1])


def draft_blocks(models: Models, x: torch.Tensor, anchors: torch.Tensor, window: str,
                 lm: TargetOutput | None = None) -> BlockOut:
    """x (B, T+1) bytes; anchors (B, A). Runs the target (unless `lm` is given), the
    parallel stage and the heads on every block."""
    T = x.shape[1] - 1
    K = models.block_size
    if lm is None:
        lm = models.target(x[:, :-1])
    prev_pos, label_pos, target_pos = window_positions(anchors, K, window)
    valid = window_valid(prev_pos, label_pos, target_pos, T)
    if models.drafter is not None:
        # (B, T, D); an HF target keeps only its hooked layers (None at the others)
        ctx = models.drafter.context([h.detach() if h is not None else None for h in lm.layer_hidden])
        anchor_emb = models.target.wte(x.gather(1, anchors))  # (B, A, D)
        h = models.drafter(ctx, anchor_emb, anchors)  # (B, A, K, D)
        U = models.target.lm_head(h)  # (B, A, K, V), shared frozen head
    else:
        # backbone: slot s of the block at a is the LM's own output at a+s
        slot_pos = anchors[:, :, None] + torch.arange(K, device=x.device)
        valid = valid & (slot_pos <= T - 1)
        h = gather_seq(lm.hidden, slot_pos)
        U = gather_seq(lm.logits, slot_pos)
    prev = gather_seq(x, prev_pos)
    labels = gather_seq(x, label_pos)
    target_logits = gather_seq(lm.logits.detach(), target_pos)
    draft, conf = models.head(h, U, prev)
    return BlockOut(draft, conf, target_logits, labels, valid, lm)


def trainable_parameters(models: Models) -> list[nn.Parameter]:
    mods: list[nn.Module] = [models.head]
    if models.drafter is not None:
        mods.append(models.drafter)
    else:
        mods.append(models.target)
    return [p for m in mods for p in m.parameters() if p.requires_grad]
