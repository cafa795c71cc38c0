"""Drafter-stage training step with and without the sequential + confidence heads.

The paper requires T_sequential << T_parallel (its Fig 4: the heads cost 0.2-1.3%). Each
arm is a Trainer of its own, timed through its public `Trainer.step` (what a run's loop
runs: forward, loss, backward, clipping, AdamW and schedule): the draft stage with the
preset's heads; the draft stage without them (head none, its confidence head on h alone,
a D -> 1 projection: the nearest config to the bare parallel stage); the target stage.
The arms run interleaved on the same batches and repeated in one process (timings here
vary by up to 30% between processes); medians are reported, with tokens/s of both stages.
The draft arms distil an untrained target: a step's time does not depend on the weights.

    python bench/train_step.py [--preset small] [--repeats 15]    # quick: --preset tiny --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import VOCAB_SIZE, Config, from_dict
from dspark.data import sample_batch
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


def make_arms(cfg: Config) -> dict[str, Trainer]:
    """The three arms, each a Trainer on one corpus, in the stage whose step it times."""
    target = Trainer(cfg)  # a new trainer stands in its target stage
    with_heads = Trainer(cfg, corpus=target.corpus)
    bare = Trainer(cfg.replace(head="none", confidence_input="hidden"), corpus=target.corpus)
    for t in (with_heads, bare):
        t.start_draft()
    return {"with heads": with_heads, "without heads": bare, "target": target}


def time_steps(arms: dict[str, Trainer], cfg: Config, repeats: int) -> dict[str, list[float]]:
    """Seconds of each arm's `step`, `repeats` rounds, every round one batch (B, T + 1) and
    its anchors (B, A) given to every arm in turn, so all see the same data and machine state."""
    gen, device = torch.Generator().manual_seed(0), arms["target"].device
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(repeats):
        x = sample_batch(arms["target"].corpus.train, cfg.batch_size, cfg.seq_len + 1, gen).to(device)
        anchors = arms["with heads"].anchors(x.shape[0]).to(device)
        for a, t in arms.items():
            t0 = time.perf_counter()
            t.step(x, None if t.stage == "target" else anchors)
            times[a].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    cfg = from_dict({"preset": args.preset, "spec_prompts": 0, "out_dir": "bench/out/train_step"})
    arms = make_arms(cfg)
    time_steps(arms, cfg, 3)  # warm-up
    mw, mo, mt = (statistics.median(v) for v in time_steps(arms, cfg, args.repeats).values())
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


if __name__ == "__main__":
    main()
