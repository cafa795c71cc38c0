"""Analysis time against replicate blocks: the committed paper study's 8 cells, grown to N
blocks (each new block a copy of an existing one with its responses jittered by the study's
own residual noise), reported and planned as `analysis report` and `analysis plan` do.
Prints seconds per N and the ratio to the 30 s goal at 400 blocks (3,200 runs).

    .venv/bin/python bench/analysis_blocks.py [--blocks 25 100 400] [--cli] [--profile N]
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import pstats
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trials.export import SweepFrame  # noqa: E402
from analysis.sweep_reader import read_parquet  # noqa: E402
from trials.export import to_parquet  # noqa: E402
from analysis.plan import plan_text  # noqa: E402
from analysis.report import build_report  # noqa: E402

GOAL_S = 30.0


def grown(sweep: SweepFrame, blocks: int, seed: int = 0) -> SweepFrame:
    """The sweep's cells in `blocks` replicate blocks: block k copies block k mod B, every
    numeric response column jittered by 5% of its spread across runs."""
    rng = np.random.default_rng(seed)
    df = sweep.runs
    have = sorted(df["replicate"].unique())
    numeric = [c for c in df.columns if "/" in c and pd.api.types.is_numeric_dtype(df[c])]
    parts = []
    for k in range(blocks):
        part = df[df["replicate"] == have[k % len(have)]].copy()
        if k >= len(have):
            for c in numeric:
                spread = float(np.nanstd(df[c].to_numpy(dtype=float))) or 0.0
                part[c] = part[c] + rng.normal(0.0, 0.05 * spread, len(part))
        part["replicate"] = k
        part["run_id"] = [f"{r}-{k}" for r in part["run_id"]]
        if "trial_key" in part:
            part["trial_key"] = [f"{t}-{k}" for t in part["trial_key"]]
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    # a fixed-sample analysis: the study's own plan stops at 6 blocks
    return dataclasses.replace(sweep, runs=out, record=dataclasses.replace(sweep.record, sequential=""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parquet", default=str(ROOT / "results" / "paper-drafter" / "runs.parquet"))
    p.add_argument("--blocks", type=int, nargs="+", default=[25, 100, 400])
    p.add_argument("--profile", type=int, help="profile the report at this many blocks instead")
    p.add_argument("--cli", action="store_true", help="also time the two commands on a parquet export of each")
    args = p.parse_args(argv)
    base = read_parquet(args.parquet)
    if args.profile:
        sweep = grown(base, args.profile)
        cProfile.runctx("build_report(sweep, None); plan_text(sweep, None)", globals(), {"sweep": sweep},
                        "/tmp/blocks.prof")
        pstats.Stats("/tmp/blocks.prof").sort_stats("cumulative").print_stats(25)
        return 0
    for n in args.blocks:
        sweep = grown(base, n)
        t0 = time.perf_counter()
        build_report(sweep, None)
        t1 = time.perf_counter()
        plan_text(sweep, None)
        t2 = time.perf_counter()
        line = f"{n:4d} blocks ({len(sweep.runs):5d} runs): report {t1 - t0:6.1f} s, plan {t2 - t1:6.1f} s"
        if n == 400:
            line += f"; each against the {GOAL_S:g} s goal: {(t1 - t0) / GOAL_S:.2f}, {(t2 - t1) / GOAL_S:.2f}"
        print(line, flush=True)
        if args.cli:
            print("       as the commands: " + commands(sweep), flush=True)
    return 0


def commands(sweep: SweepFrame) -> str:
    """`analysis report` (its HTML and plots written) and `analysis plan` on the frame as a
    parquet export, each a fresh process, whole wall times."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.parquet"
        to_parquet(sweep, path)
        name = sweep.record.experiment
        out = []
        for cmd in (["report", name, "--parquet", str(path), "--out", tmp], ["plan", name, "--parquet", str(path)]):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "analysis.cli", *cmd], cwd=ROOT, check=True, capture_output=True)
            out.append(f"{cmd[0]} {time.perf_counter() - t0:.1f} s")
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
