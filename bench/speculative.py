"""Speculative decoding with the `small` preset drafter against autoregressive decoding
of the same target, in one process.

Trains the small preset once (or loads bench/out/small/checkpoint), then decodes the same
held-out prompts both ways, interleaved and repeated, and prints medians: spec/tau,
spec/tau_greedy, the speedup (sampled and greedy) and the time per round split into
drafter forward, sequential loop, verification and the rest.

    python bench/speculative.py [--prompts 24] [--repeats 3] [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from dspark.config import from_dict
from dspark.speculative_eval import DECODE_SEED, prompts_from
from dspark.speculate import RoundStats, autoregressive, generate
from dspark.train import Trainer

OUT = Path("bench/out/small")


def load_or_train() -> Trainer:
    cfg = from_dict({"preset": "small", "out_dir": str(OUT)})
    t = Trainer(cfg)
    ckpt = OUT / "checkpoint"
    if (ckpt / "state.pt").is_file():
        t.load_checkpoint(ckpt)
        if t.stage != "done":
            t.run()
    else:
        print("training the small preset (a few minutes; reused next time)...")
        t.run()
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args()
    t = load_or_train()
    cfg = t.cfg
    target, drafter, head = t.target.eval(), t.drafter.eval(), t.head.eval()
    prompts = prompts_from(t.corpus.val, args.prompts, cfg.spec_prompt_len)
    n = args.new_tokens
    results = {}
    for temperature, label in ((1.0, "sampled"), (0.0, "greedy")):
        ratios, taus, stats_all = [], [], []
        for rep in range(args.repeats):
            ar_s = spec_s = 0.0
            stats = RoundStats()
            for i, p in enumerate(prompts):
                g = torch.Generator().manual_seed(DECODE_SEED + i)
                t0 = time.perf_counter()
                autoregressive(target, p, n, temperature, g)
                ar_s += time.perf_counter() - t0
                g = torch.Generator().manual_seed(DECODE_SEED + i)
                t0 = time.perf_counter()
                generate(target, drafter, head, p, n, temperature, g, stats)
                spec_s += time.perf_counter() - t0
            ratios.append(ar_s / spec_s)
            taus.append(float(np.mean([a + 1 for a in stats.accepted])))
            stats_all.append(stats)
        s = stats_all[-1]
        rounds = len(s.accepted)
        rest = s.total_ms - s.draft_ms - s.seq_ms - s.verify_ms
        results[label] = dict(tau=statistics.median(taus), speedup=statistics.median(ratios),
                              draft=s.draft_ms / rounds, seq=s.seq_ms / rounds, verify=s.verify_ms / rounds,
                              rest=rest / rounds, round=s.total_ms / rounds)
    print(f"small preset, K={cfg.block_size}, {args.prompts} prompts x {n} new tokens, {args.repeats} interleaved "
          f"repeats (median), {torch.get_num_threads()} threads")
    for label, r in results.items():
        print(f"{label:8s} tau {r['tau']:.3f}  speedup {r['speedup']:.2f}x  round {r['round']:.2f} ms = "
              f"drafter {r['draft']:.2f} + sequential {r['seq']:.2f} ({100 * r['seq'] / r['round']:.1f}%) + "
              f"verify {r['verify']:.2f} + rest {r['rest']:.2f}")
    print("goals at K=7: speedup >= 1.5x sampled and >= 2x greedy; sequential loop < 15% of a round")


if __name__ == "__main__":
    main()
