"""Speculative decoding with a preset's drafter against autoregressive decoding of the
same target, in one process.

Trains the preset once (or loads bench/out/<preset>/checkpoint), then decodes the same
held-out prompts both ways, interleaved and repeated, and prints medians and the spread
over repeats: spec/tau, the speedup (sampled and greedy), the time per round split into
drafter forward, sequential loop, verification and the rest, and a cost model: with one
autoregressive step costing `ar` ms, a round that commits tau tokens for one drafter
forward and one verify forward can at best be tau * ar / (drafter + verify) times faster;
the loop's efficiency is the measured speedup over that.

    python bench/speculative.py [--preset small] [--prompts 24] [--repeats 3] [--new-tokens 96]
    python bench/speculative.py --sweep sweeps/demo.yaml --cell D1=aligned,D2=block,D9=markov
    python bench/speculative.py --preset tiny --compile
    python bench/speculative.py --sweep sweeps/demo.yaml --set draft_steps=1500

`--sweep` takes one cell of a sweep (replicate 0) instead of a preset, e.g. the demo's, and
decodes on one thread, as a trial with `cpu: 1` does; `--set` changes config fields.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import from_dict
from dspark.speculative_eval import DECODE_SEED, prompts_from
from dspark.speculate import RoundStats, autoregressive, compiled, generate
from dspark.train import Trainer

def sweep_cell(path: str, cell: str):
    """The config of one cell of a sweep (replicate 0) and its bench folder name."""
    from trials.validate import load_spec

    spec = load_spec(path)
    want = dict(kv.split("=", 1) for kv in cell.split(",")) if cell else {}
    for trial in spec.trials:
        if trial.replicate == 0 and all(trial.levels.get(k) == v for k, v in want.items()):
            return trial.config, f"{spec.name}-{trial.cell.replace('|', '-').replace('=', '_')}"
    raise SystemExit(f"--cell: no cell of {path} has levels {cell!r}")


def load_or_train(preset: str, sweep: str | None = None, cell: str = "", overrides: list[str] = ()) -> Trainer:
    if sweep:
        cfg, name = sweep_cell(sweep, cell)
        raw = cfg.to_dict()
    else:
        name, raw = preset, {"preset": preset}
    changes = dict(kv.split("=", 1) for kv in overrides)
    name += "".join(f"-{k}_{v}" for k, v in changes.items())
    out = Path("bench/out") / name
    cfg = from_dict({**raw, **changes, "out_dir": str(out)})
    t = Trainer(cfg)
    ckpt = out / "checkpoint"
    if (ckpt / "state.pt").is_file():
        t.load_checkpoint(ckpt)
        if t.stage != "done":
            t.run()
    else:
        print(f"training {out.name} (reused next time)...")
        t.run()
    return t


def measure(models, prompts, n: int, repeats: int, temperature: float) -> dict:
    """Both decoders on every prompt, interleaved, `repeats` times: medians, spread, round split."""
    target, drafter, head = models
    ratios, taus, stats_all = [], [], []
    for rep in range(repeats):
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
        stats_all.append((stats, ar_s))
    s, ar_s = stats_all[-1]
    rounds = len(s.accepted)
    rest = s.total_ms - s.draft_ms - s.seq_ms - s.verify_ms
    ar_step = 1000.0 * ar_s / (len(prompts) * n)  # ms per autoregressive token
    draft, seq, verify = s.draft_ms / rounds, s.seq_ms / rounds, s.verify_ms / rounds
    model = statistics.median(taus) * ar_step / (draft + verify)
    return dict(tau=statistics.median(taus), speedup=statistics.median(ratios), lo=min(ratios), hi=max(ratios),
                draft=draft, seq=seq, verify=verify, rest=rest / rounds, round=s.total_ms / rounds, ar=ar_step,
                model=model)


def warm_up(models, prompt, n: int) -> float:
    """Seconds to compile every shape decoding meets (prefill, one token, a block, each
    accepted length), both decoders, both temperatures."""
    target, drafter, head = models
    t0 = time.perf_counter()
    for temperature in (1.0, 0.0):
        for seed in range(4):
            g = torch.Generator().manual_seed(seed)
            autoregressive(target, prompt, n, temperature, g)
            generate(target, drafter, head, prompt, n, temperature, g)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="small", choices=["tiny", "small"])
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--sweep", help="a sweep spec: bench one of its cells instead of a preset")
    ap.add_argument("--cell", default="", help="with --sweep: levels as D1=aligned,D2=block (default: the first cell)")
    ap.add_argument("--compile", action="store_true",
                    help="both decoders through torch.compile (dspark.speculate.compiled), warmed up before timing")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="change a config field (repeatable), e.g. draft_steps=1500; trains into its own folder")
    args = ap.parse_args()
    t = load_or_train(args.preset, args.sweep, args.cell, args.set)
    if args.sweep:
        torch.set_num_threads(1)
    cfg = t.cfg
    target, drafter, head = t.target.eval(), t.drafter.eval(), t.head.eval()
    prompts = prompts_from(t.corpus.val, args.prompts, cfg.spec_prompt_len)
    mode = "eager"
    if args.compile:
        target, drafter, head = compiled(target, drafter, head)
        mode = f"compiled (warm-up {warm_up((target, drafter, head), prompts[0], args.new_tokens):.0f} s)"
    results = {label: measure((target, drafter, head), prompts, args.new_tokens, args.repeats, temperature)
               for temperature, label in ((1.0, "sampled"), (0.0, "greedy"))}
    print(f"{Path(cfg.out_dir).name}, K={cfg.block_size}, {args.prompts} prompts x {args.new_tokens} new tokens, "
          f"{args.repeats} interleaved repeats (median, min-max), {torch.get_num_threads()} threads, {mode}")
    for label, r in results.items():
        print(f"{label:8s} tau {r['tau']:.3f}  speedup {r['speedup']:.2f}x ({r['lo']:.2f}-{r['hi']:.2f})  "
              f"round {r['round']:.2f} ms = drafter {r['draft']:.2f} + sequential {r['seq']:.2f} "
              f"({100 * r['seq'] / r['round']:.1f}%) + verify {r['verify']:.2f} + rest {r['rest']:.2f}")
        print(f"{'':8s} cost model: AR step {r['ar']:.2f} ms, verify = {r['verify'] / r['ar']:.2f} AR steps, "
              f"drafter = {r['draft'] / r['ar']:.2f} AR steps -> model speedup {r['model']:.2f}x; "
              f"loop efficiency {r['speedup'] / r['model']:.2f}")
    print("goals at K=7: speedup >= 1.0 (tiny), >= 1.5x sampled and >= 2x greedy (small); "
          "sequential loop < 15% of a round")


if __name__ == "__main__":
    main()
