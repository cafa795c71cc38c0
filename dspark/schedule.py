"""Confidence-scheduled verification: Algorithm 1 (the hardware-aware prefix scheduler)
and the steps-per-second table that drives it.

Algorithm 1 admits draft positions in descending order of prefix survival probability
a_{r,j} = prod_{i<=j} c_{r,i}, tracking throughput Theta = tau * SPS(B), and stops at the
first admission that does not raise Theta: the early stop keeps every admission decision
independent of tokens not yet drafted (non-anticipating, paper Appendix A), so decoding
stays lossless. The curves it runs on (`sched_curve`) and `sps_lookup` live in dspark.curves.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from .curves import sps_lookup
from .model import sync

__all__ = ["load_or_measure_sps", "measure_sps", "prefix_schedule", "sps_lookup"]


def prefix_schedule(confidences, sps: Mapping[int, float]) -> list[int]:
    """Algorithm 1 as printed in the paper.

    confidences (R, K): per-request per-slot c values; sps: batch size in tokens -> steps
    per second. Returns the verification length l_r* per request (0..K).
    """
    c = np.asarray(confidences.detach().cpu() if isinstance(confidences, torch.Tensor) else confidences,
                   dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"prefix_schedule: confidences must be (R, K), got shape {c.shape}")
    if not sps:
        raise ValueError("prefix_schedule: the SPS table is empty")
    R, K = c.shape
    a = np.cumprod(c, axis=1)  # line 2: prefix survival probabilities
    # line 4: candidates with a > 0, descending; equal probabilities keep slot order
    cand = sorted(((r, j) for r in range(R) for j in range(K) if a[r, j] > 0),
                  key=lambda rj: (-a[rj], rj[1], rj[0]))
    lengths = [0] * R  # line 5
    B, tau = R, float(R)
    best = R * sps_lookup(sps, R)  # line 6
    chosen = [0] * R
    for r, j in cand:  # line 7
        lengths[r] = j + 1
        B += 1
        tau += a[r, j]  # line 8
        theta = tau * sps_lookup(sps, B)  # line 9
        if theta > best:  # line 10
            best = theta
            chosen = list(lengths)  # line 11
        else:
            break  # line 13: the early stop
    return chosen


@torch.inference_mode()
def measure_sps(target, batch_sizes, context_len: int, repeats: int = 5) -> dict[int, float]:
    """Time one target forward over B new tokens on top of a context of `context_len`
    (a verification step of B tokens in total); steps per second per B (median)."""
    device = target.lm_head.weight.device
    table = {}
    max_b = max(batch_sizes)
    cache = target.new_cache(1, context_len + max_b + 1)
    target(torch.zeros(1, context_len, dtype=torch.long, device=device), cache)
    for B in batch_sizes:
        x = torch.zeros(1, B, dtype=torch.long, device=device)
        times = []
        for _ in range(repeats + 1):
            cache.crop(context_len)
            sync(device)
            t0 = time.perf_counter()
            target(x, cache)
            sync(device)
            times.append(time.perf_counter() - t0)
        table[int(B)] = 1.0 / float(np.median(times[1:]))
    return table


def load_or_measure_sps(target, path: str | os.PathLike, batch_sizes, context_len: int) -> dict[int, float]:
    """Profile once per (target shape, device), store as JSON, reuse afterwards."""
    path = Path(path)
    device = target.lm_head.weight.device
    key = json.dumps({**target.arch(), "device": str(device.type), "context_len": context_len,
                      "batch_sizes": sorted(int(b) for b in batch_sizes)}, sort_keys=True)
    store = json.loads(path.read_text()) if path.is_file() else {}
    if key not in store:
        store[key] = {str(b): v for b, v in measure_sps(target, batch_sizes, context_len).items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(store, indent=1))
        os.replace(tmp, path)
    return {int(b): float(v) for b, v in store[key].items()}
