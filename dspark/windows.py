"""Which sequence positions a draft block reads: the D1 switch (README, "The factors").

For a block anchored at a and slot s = 0..K-1 (the paper's k = s+1), three positions:
`prev` (the token fed to the sequential and confidence heads, x_{k-1}), `label` (the CE
target x_k*) and `target` (the target-LM position whose output distribution is the TV
target and defines c*; the LM's output at position p predicts x[p+1]).

| window   | prev     | label    | target   |
|----------|----------|----------|----------|
| aligned  | a+s      | a+s+1    | a+s      |  the paper and its reference code
| shifted  | a+s+1    | a+s+2    | a+s+1    |  the seed's code: the window reads the labels
| ids_only | a+s      | a+s+1    | a+s+1    |  the seed's one-line fix: TV target still one ahead

h_k and U_k stay at slot s in every window.
"""

from __future__ import annotations

import torch

WINDOW_OFFSETS = {  # (prev, label, target) offsets from a+s
    "aligned": (0, 1, 0),
    "shifted": (1, 2, 1),
    "ids_only": (0, 1, 1),
}


def window_positions(anchors: torch.Tensor, block_size: int, window: str):
    """anchors (..., A) -> prev, label, target positions, each (..., A, K)."""
    if window not in WINDOW_OFFSETS:
        raise ValueError(f"window: unknown level {window!r}; allowed: {', '.join(WINDOW_OFFSETS)}")
    if block_size < 1:
        raise ValueError(f"block_size: must be >= 1, got {block_size}")
    base = anchors.long()[..., None] + torch.arange(block_size, device=anchors.device)  # (..., A, K)
    dp, dl, dt = WINDOW_OFFSETS[window]
    return base + dp, base + dl, base + dt


def window_valid(prev: torch.Tensor, label: torch.Tensor, target: torch.Tensor, seq_len: int) -> torch.Tensor:
    """A slot is valid while every position it reads lies in a sequence x[0..seq_len]
    whose LM outputs exist at 0..seq_len-1; validity is a contiguous prefix (cumprod)."""
    ok = (prev <= seq_len) & (label <= seq_len) & (target <= seq_len - 1)
    return ok.long().cumprod(dim=-1).bool()


def strided_anchors(seq_len: int, stride: int) -> torch.Tensor:
    """Anchors 1, 1+stride, ... while slot 0's label lies in the sequence: (A,)."""
    if stride < 1:
        raise ValueError(f"stride: must be >= 1, got {stride}")
    return torch.arange(1, seq_len, stride)


def random_anchors(batch: int, n: int, seq_len: int, block_size: int, generator: torch.Generator) -> torch.Tensor:
    """n distinct anchors per row, drawn from 1..seq_len-block_size so that an aligned
    block fits whole: (B, A), sorted."""
    hi = max(seq_len - block_size, 1)
    n = min(n, hi)
    scores = torch.rand(batch, hi, generator=generator)
    return scores.topk(n, dim=1).indices.sort(dim=1).values + 1
