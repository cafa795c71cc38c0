"""The seed's question "does the aux head earn its share of the step", cost side: one
backbone-stage training step with the DSpark aux loss (the seed's wiring: RNN head, K = 4,
anchors strided every 16, aux weight 0.1) against a pure-CE step of the same LM (the
control: no head at all), interleaved in one process. Prints medians, the ratio and the
spread of the per-pair ratios, for both D9 arms.

    python bench/aux_step.py [--repeats 40]     # the seed-backbone study's model by default
"""

from __future__ import annotations

import argparse
import statistics
import time

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import VOCAB_SIZE, from_dict
from dspark.data import sample_batch
from dspark.heads import DraftHead
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
    t = Trainer(cfg)
    pure = Trainer(cfg.replace(aux_weight=0.0), corpus=t.corpus)
    pure.target = t.target  # the same LM: the arms differ only in the aux loss
    heads = {ci: DraftHead("rnn", ci, VOCAB_SIZE, cfg.d_model, cfg.markov_rank) for ci in ("hidden", "hidden+markov")}
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW([*t.target.parameters(), *(p for h in heads.values() for p in h.parameters())], lr=1e-4)
    t.target.train()

    def step(head: DraftHead | None) -> float:
        x = sample_batch(t.corpus.train, cfg.batch_size, cfg.seq_len + 1, gen)
        anchors = t.anchors(x.shape[0])
        t0 = time.perf_counter()
        if head is None:  # the pure-CE control: the trainer's own step with aux_weight 0 (no head runs)
            loss, _ = pure.head_loss(x, anchors)
        else:  # the trainer's own joint step: CE_lm + aux_weight * L_dspark with the config's weights
            t.models.head = head
            loss, _ = t.head_loss(x, anchors)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0

    arms = {"pure CE": None, "aux, D9=hidden": heads["hidden"], "aux, D9=hidden+markov": heads["hidden+markov"]}
    for _ in range(3):  # warm-up
        for h in arms.values():
            step(h)
    times = {a: [] for a in arms}
    for _ in range(args.repeats):
        for a, h in arms.items():
            times[a].append(step(h))
    print(f"seed's system: backbone, d={cfg.d_model} L={cfg.n_layers} seq={cfg.seq_len} batch={cfg.batch_size} "
          f"K={cfg.block_size} rnn rank={cfg.markov_rank}, {torch.get_num_threads()} threads, "
          f"{args.repeats} interleaved repeats (medians)")
    _print_ratios(times)
    print(f"parameters: LM {sum(p.numel() for p in t.target.parameters()):,}; "
          f"head {sum(p.numel() for p in heads['hidden+markov'].parameters()):,}")


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
