"""val/bpb's noise per machine-minute in the seed's system, for choosing a study's settings.

The seed's system (backbone stage, RNN head, K = 4, strided anchors every 16, aux weight
0.1, `small` preset at d_model 128, seq_len 128) trains the 2 x 2 of D1 (shifted, aligned)
and D9 (hidden, hidden+markov) at decay 4 for `--seeds` replicate seeds, under each setting:

    steps400    the committed seed study's settings (400 joint steps)
    steps800    the same, 800 steps
    steps1600   the same, 1600 steps
    tiny400     a smaller LM (the `tiny` preset's d_model 64 and 2 layers), 400 steps

and, on each run's final checkpoint, evaluates val/bpb on its first 8, 32 and 128 held-out
batches (the run's own 8 first, `data.held_out_batches`, as `trials reeval --eval-batches`
does). A replicate seed is a block as in a sweep (every arm of a seed shares it), so the
noise that decides a term is the residual sigma of the additive model arm + seed (statsmodels
OLS, df (arms - 1)(seeds - 1)). With n blocks of c runs of t minutes each, a contrast's
standard error is about sigma / sqrt(n) for n c t minutes, so the machine time that buys a
given interval is proportional to sigma^2 t: the table prints it relative to steps400 at 8
batches (below 1: the same interval for less machine time). The D1 and D9 estimates are
printed too, since a longer run may change the effect as well as the noise.

    python bench/bpb_noise.py                          # all settings, 3 seeds, 2 workers (~75 min here)
    python bench/bpb_noise.py --settings tiny400 --seeds 2 --steps-scale 0.05   # a quick check
    python bench/bpb_noise.py --from bench/out/bpb_noise/runs.jsonl             # the table again

Each finished run is appended to `runs.jsonl` in `--out` as it ends, so a stopped bench
keeps what it measured (`--from` prints the table of a partial file).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing
import statistics
import time
from pathlib import Path

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import from_dict
from dspark.evaluate import lm_bpb
from dspark.train import Trainer

SEED_SYSTEM = dict(preset="small", parallel_stage="backbone", head="rnn", block_size=4, anchors="strided",
                   stride=16, aux_weight=0.1, d_model=128, seq_len=128, spec_prompts=0, decay_gamma=4.0)
SETTINGS = {
    "steps400": dict(target_steps=400, eval_interval=100),
    "steps800": dict(target_steps=800, eval_interval=200),
    "steps1600": dict(target_steps=1600, eval_interval=400),
    "tiny400": dict(target_steps=400, eval_interval=100, d_model=64, n_layers=2, context_layers=(0, 1)),
}
ARMS = {
    "shifted/hidden": dict(window="shifted", confidence_input="hidden"),
    "shifted/markov": dict(window="shifted", confidence_input="hidden+markov"),
    "aligned/hidden": dict(window="aligned", confidence_input="hidden"),
    "aligned/markov": dict(window="aligned", confidence_input="hidden+markov"),
}
EVAL_SIZES = (8, 32, 128)


def one_run(setting: str, arm: str, seed: int, steps_scale: float, out: str) -> dict:
    """Train one arm of one setting at one seed in this process (one thread); return its
    training minutes and val/bpb at each evaluation size."""
    torch.set_num_threads(1)
    over = dict(SETTINGS[setting])
    over["target_steps"] = max(2, round(over["target_steps"] * steps_scale))
    over["eval_interval"] = max(1, round(over["eval_interval"] * steps_scale))
    cfg = from_dict({**SEED_SYSTEM, **over, **ARMS[arm], "seed": seed,
                     "out_dir": f"{out}/{setting}/{arm.replace('/', '-')}-s{seed}"})
    t0 = time.perf_counter()
    trainer = Trainer(cfg)
    trainer.run()
    train_min = (time.perf_counter() - t0) / 60
    row = {"setting": setting, "arm": arm, "seed": seed, "steps": cfg.target_steps, "train_min": train_min}
    for n in EVAL_SIZES:
        t1 = time.perf_counter()
        row[f"bpb@{n}"] = lm_bpb(trainer.target, trainer.held_out(n), trainer.device, trainer.autocast)
        row[f"eval_min@{n}"] = (time.perf_counter() - t1) / 60
    return row


def residual_sigma(rows: list[dict], key: str) -> tuple[float, int, dict[str, float]]:
    """The residual sigma of key under arm + seed (statsmodels OLS), its df, and the D1 and
    D9 main effects (aligned minus shifted, markov minus hidden) from the arms' means."""
    import pandas as pd
    import statsmodels.formula.api as smf

    df = pd.DataFrame(rows).rename(columns={key: "y"})
    fit = smf.ols("y ~ C(arm) + C(seed)", data=df).fit()
    means = df.groupby("arm")["y"].mean()
    effects = {"D1": (means["aligned/hidden"] + means["aligned/markov"]
                      - means["shifted/hidden"] - means["shifted/markov"]) / 2,
               "D9": (means["shifted/markov"] + means["aligned/markov"]
                      - means["shifted/hidden"] - means["aligned/hidden"]) / 2}
    return math.sqrt(fit.scale), int(fit.df_resid), effects


def table(rows: list[dict]) -> list[str]:
    """One line per setting and evaluation size with enough complete seeds: sigma, df,
    minutes per run, relative machine time for the same interval, the effects."""
    lines = [f"{'setting':<10} {'batches':>7} {'seeds':>5} {'bpb':>6} {'sigma':>7} {'df':>3} {'min/run':>8} "
             f"{'time x':>7}  {'D1':>8} {'D9':>8}"]
    base = None
    for setting in SETTINGS:
        runs = [r for r in rows if r["setting"] == setting]
        seeds = sorted({r["seed"] for r in runs if sum(q["seed"] == r["seed"] for q in runs) == len(ARMS)})
        runs = [r for r in runs if r["seed"] in seeds]
        if len(seeds) < 2:
            continue
        for n in EVAL_SIZES:
            sigma, df, eff = residual_sigma(runs, f"bpb@{n}")
            minutes = statistics.median(r["train_min"] + r[f"eval_min@{n}"] for r in runs)
            cost = sigma ** 2 * minutes
            base = cost if base is None else base
            mean = statistics.fmean(r[f"bpb@{n}"] for r in runs)
            lines.append(f"{setting:<10} {n:>7} {len(seeds):>5} {mean:>6.3f} {sigma:>7.4f} {df:>3} {minutes:>8.2f} "
                         f"{cost / base:>7.2f}  {eff['D1']:>+8.4f} {eff['D9']:>+8.4f}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--seeds", type=int, default=3, help="replicate seeds per setting (>= 2)")
    ap.add_argument("--workers", type=int, default=2, help="runs at once, one thread each")
    ap.add_argument("--steps-scale", type=float, default=1.0, help="scale every setting's steps (a quick check)")
    ap.add_argument("--out", default="bench/out/bpb_noise")
    ap.add_argument("--from", dest="from_file", help="print the table of a runs.jsonl and stop")
    args = ap.parse_args()
    if args.from_file:
        rows = [json.loads(line) for line in Path(args.from_file).read_text().splitlines() if line.strip()]
        print("\n".join(table(rows)))
        return
    if args.seeds < 2 or args.workers < 1 or not args.steps_scale > 0:
        ap.error("--seeds must be >= 2, --workers >= 1 and --steps-scale > 0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.jsonl"
    done = set()
    rows = []
    if log.exists():  # a stopped bench goes on where it stopped
        rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r["steps"] == max(2, round(SETTINGS[r["setting"]]["target_steps"] * args.steps_scale))]
        done = {(r["setting"], r["arm"], r["seed"]) for r in rows}
    jobs = [(s, a, seed) for s in args.settings for seed in range(args.seeds) for a in ARMS
            if (s, a, seed) not in done]
    ctx = multiprocessing.get_context("spawn")
    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        futures = [pool.submit(one_run, s, a, seed, args.steps_scale, str(out)) for s, a, seed in jobs]
        for fut in cf.as_completed(futures):
            row = fut.result()
            rows.append(row)
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{(time.perf_counter() - t0) / 60:5.1f} min] {row['setting']} {row['arm']} s{row['seed']}: "
                  f"{row['train_min']:.2f} min, val/bpb {row['bpb@8']:.4f} (8) {row['bpb@128']:.4f} (128)", flush=True)
    print(f"\nval/bpb noise in the seed's system ({args.workers} runs at once, one thread each; "
          f"{(time.perf_counter() - t0) / 60:.1f} min in all). 'time x': machine time for the same interval, "
          "relative to the first line")
    print("\n".join(table(rows)))


if __name__ == "__main__":
    main()
