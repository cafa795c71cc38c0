"""The seed's question "does the aux head earn its share of the step", cost side: one
backbone-stage training step with the DSpark aux loss (the seed's wiring: RNN head, K = 4,
anchors strided every 16, aux weight 0.1) against a pure-CE step of the same LM (the
control: aux_weight 0, no head at all), for both D9 arms. Each arm is a Trainer of its
own config, timed through its public `Trainer.step` (the run's own step: forward, loss,
backward, clipping, AdamW and schedule); the three LMs start from the same seed, and the
arms step interleaved on the same batches in one process. Prints medians, the ratio and
the spread of the per-pair ratios.

    python bench/aux_step.py [--repeats 40]     # the seed-backbone study's model by default
    python bench/aux_step.py --repeats 3 --d-model 64 --seq-len 64     # quick
"""

from __future__ import annotations

import argparse
import statistics
import time

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import Config, from_dict
from dspark.data import sample_batch
from dspark.train import Trainer

SEED_SYSTEM = dict(preset="small", parallel_stage="backbone", head="rnn", block_size=4, anchors="strided",
                   stride=16, aux_weight=0.1, d_model=128, seq_len=128, spec_prompts=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=128)
    args = ap.parse_args()
    cfg = from_dict({**SEED_SYSTEM, "d_model": args.d_model, "seq_len": args.seq_len,
                     "out_dir": "bench/out/aux_step"})
    pure = Trainer(cfg.replace(aux_weight=0.0))  # the pure-CE control: the trainer runs no head
    arms = {"pure CE": pure,
            "aux, D9=hidden": Trainer(cfg.replace(confidence_input="hidden"), corpus=pure.corpus),
            "aux, D9=hidden+markov": Trainer(cfg.replace(confidence_input="hidden+markov"), corpus=pure.corpus)}
    time_steps(arms, cfg, 3)  # warm-up
    times = time_steps(arms, cfg, args.repeats)
    print(f"seed's system: backbone, d={cfg.d_model} L={cfg.n_layers} seq={cfg.seq_len} batch={cfg.batch_size} "
          f"K={cfg.block_size} rnn rank={cfg.markov_rank}, {torch.get_num_threads()} threads, "
          f"{args.repeats} interleaved repeats (medians)")
    _print_ratios(times)
    print(f"parameters: LM {sum(p.numel() for p in pure.target.parameters()):,}; "
          f"head {sum(p.numel() for p in arms['aux, D9=hidden+markov'].head.parameters()):,}")


def time_steps(arms: dict[str, Trainer], cfg: Config, repeats: int) -> dict[str, list[float]]:
    """Seconds of each arm's `step`, `repeats` rounds, every round one batch (B, T + 1) and
    its strided anchors (B, A) given to every arm in turn."""
    gen, device = torch.Generator().manual_seed(0), arms["pure CE"].device
    times: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(repeats):
        x = sample_batch(arms["pure CE"].corpus.train, cfg.batch_size, cfg.seq_len + 1, gen).to(device)
        anchors = arms["pure CE"].anchors(x.shape[0]).to(device)
        for a, t in arms.items():
            t0 = time.perf_counter()
            t.step(x, anchors)
            times[a].append(time.perf_counter() - t0)
    return times


def _print_ratios(times: dict[str, list[float]]) -> None:
    """Each arm's median step, and its ratio to pure CE measured pair by pair."""
    base = times["pure CE"]
    for a, ts in times.items():
        line = f"{a:24s} {1e3 * statistics.median(ts):8.1f} ms"
        if a != "pure CE":
            ratios = sorted(x / b for x, b in zip(ts, base))
            q1, q3 = ratios[len(ratios) // 4], ratios[3 * len(ratios) // 4]
            line += (f"   x{statistics.median(ts) / statistics.median(base):.3f} of pure CE "
                     f"(per-pair ratios: median {statistics.median(ratios):.3f}, IQR {q1:.3f}-{q3:.3f})")
        print(line)


if __name__ == "__main__":
    main()
