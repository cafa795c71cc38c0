"""Drafter-stage training step with and without the sequential + confidence heads.

The paper requires T_sequential << T_parallel (its Fig 4: the heads cost 0.2-1.3%). Both
variants run interleaved and repeated in one process (timings here vary by up to 30%
between processes); medians are reported, with tokens/s of both stages.

    python bench/train_step.py [--preset small] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch
import torch.nn.functional as F

from dspark.blocks import draft_blocks, trainable_parameters
from dspark.config import VOCAB_SIZE, from_dict
from dspark.data import sample_batch
from dspark.loss import dspark_loss
from dspark.train import Trainer


def peak_flops(n: int = 1536, repeats: int = 5) -> float:
    """The machine's measured fp32 matmul peak (FLOP/s): the best of a few n x n matmuls."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_time(lambda: a @ b) for _ in range(repeats))
    return 2 * n ** 3 / best


def target_flops_per_token(cfg) -> float:
    """Forward + backward of the target LM per token: 6 x the matmul parameters plus the
    attention scores (6 x n_layers x seq_len x d_model, causal half counted in full)."""
    d, L, T = cfg.d_model, cfg.n_layers, cfg.seq_len
    params = L * 12 * d * d + d * VOCAB_SIZE  # attention 4d^2 + MLP 8d^2 per layer, the output head
    return 6 * params + 6 * L * T * d


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def make_steps(t: Trainer, cfg):
    """(draft step with heads, draft step without them, target step): each returns seconds."""
    models, params = t.models, trainable_parameters(t.models)
    opt = torch.optim.AdamW(params, lr=1e-4)
    target_opt = torch.optim.AdamW(t.target.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)

    def batch():
        return sample_batch(t.corpus.train, cfg.batch_size, cfg.seq_len + 1, gen)

    def draft_step(with_heads: bool) -> float:
        x = batch()
        anchors = t.anchors(x.shape[0])
        t0 = time.perf_counter()
        with torch.no_grad():
            lm = t.target(x[:, :-1])
        head = models.head
        if not with_heads:  # the bare parallel stage: U_k alone, no sequential bias, no confidence head
            models.head = _Bare()
        out = draft_blocks(models, x, anchors, cfg.window, lm=lm)
        models.head = head
        res = dspark_loss(draft_logits=out.draft_logits, target_logits=out.target_logits, labels=out.labels,
                          valid=out.valid, confidence_logits=out.conf_logits if with_heads else None,
                          decay_gamma=cfg.decay_denominator, alphas=(cfg.alpha_ce, cfg.alpha_tv, cfg.alpha_conf))
        opt.zero_grad(set_to_none=True)
        res["loss"].backward()
        opt.step()
        return time.perf_counter() - t0

    def target_step() -> float:
        x = batch()
        t0 = time.perf_counter()
        for p in t.target.parameters():
            p.requires_grad_(True)
        logits = t.target(x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), x[:, 1:].reshape(-1))
        target_opt.zero_grad(set_to_none=True)
        loss.backward()
        target_opt.step()
        for p in t.target.parameters():
            p.requires_grad_(False)
        return time.perf_counter() - t0

    return (lambda: draft_step(True)), (lambda: draft_step(False)), target_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    cfg = from_dict({"preset": args.preset, "spec_prompts": 0, "out_dir": "bench/out/train_step"})
    t = Trainer(cfg)
    t.start_draft()
    steps = make_steps(t, cfg)
    for _ in range(3):  # warm-up
        [step() for step in steps]
    times = [[], [], []]
    for _ in range(args.repeats):  # interleaved, so all three see the same machine state
        for acc, step in zip(times, steps):
            acc.append(step())
    mw, mo, mt = (statistics.median(v) for v in times)
    tokens = cfg.batch_size * cfg.seq_len
    peak = peak_flops()
    achieved = tokens / mt * target_flops_per_token(cfg)
    print(f"preset {args.preset}: d={cfg.d_model} L={cfg.n_layers} drafter_layers={cfg.drafter_layers} "
          f"K={cfg.block_size} head={cfg.head} rank={cfg.markov_rank} batch={cfg.batch_size}x{cfg.seq_len}, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats (medians)")
    print(f"drafter step with heads    {mw * 1e3:8.1f} ms")
    print(f"drafter step without heads {mo * 1e3:8.1f} ms")
    print(f"heads add                  {100 * (mw / mo - 1):+8.2f} %   (goal <= 5%)")
    print(f"drafter stage tokens/s     {tokens / mw:8.0f}")
    print(f"target stage tokens/s      {tokens / mt:8.0f}")
    print(f"target stage MFU           {100 * achieved / peak:8.1f} %   ({achieved / 1e9:.1f} GFLOP/s of a measured "
          f"fp32 matmul peak of {peak / 1e9:.1f} GFLOP/s)")


class _Bare(torch.nn.Module):
    def forward(self, h, U, prev):
        return U, U.new_zeros(U.shape[:-1])


if __name__ == "__main__":
    main()
