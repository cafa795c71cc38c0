"""Ray Tune + MLflow overhead: a small sweep through the real stack against the same
trials run one after another in a plain loop (dspark.train, no Ray, no tracking), the
loop's time divided by the sweep's parallelism.

    python bench/sweep_overhead.py [--draft-steps 600] [--checkpoint-every-s 60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.train import train, train_shared_target
from trials import runner
from trials.spec import parse

PARALLEL = 2


def spec(draft_steps: int, checkpoint_every_s: float):
    return parse({
        "name": "overhead", "max_concurrent": PARALLEL, "replicates": 1,
        "base": {"preset": "tiny", "target_steps": 200, "draft_steps": draft_steps, "eval_interval": 50,
                 "spec_prompts": 4, "checkpoint_every_s": checkpoint_every_s},
        "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
                    "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}}},
    })


def plain(s, target: Path, tmp: str) -> tuple[float, float]:
    """(a plain loop of the trials, one thread; the same trials in two plain processes)."""
    import multiprocessing as mp

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # each Ray trial gets one CPU (one torch thread); so does the loop
    t0 = time.perf_counter()
    for t in s.trials:
        train(t.config.replace(target_path=str(target), out_dir=f"{tmp}/loop/{t.replicate}"))
    loop = time.perf_counter() - t0
    torch.set_num_threads(threads)
    jobs = [(t.config.replace(target_path=str(target), out_dir=f"{tmp}/pool/{i}").to_dict(),)
            for i, t in enumerate(s.trials)]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(PARALLEL) as pool:
        pool.starmap(_one_thread_train, jobs)
    return loop, time.perf_counter() - t0


def through_ray(s, target: Path, tmp: str, tag: str = "cold") -> dict:
    """The sweep through Ray Tune + MLflow, its parts timed."""
    import shutil

    from dspark import targets

    h, _ = targets.address(s.trials[0].config)
    dest = targets.target_file(Path(tmp) / f"st-{tag}", h)
    dest.parent.mkdir(parents=True)
    shutil.copy(target, dest)  # the shared target is common to both paths: not timed
    t0 = time.perf_counter()
    out = runner.run(s, tracking_uri=f"sqlite:///{tmp}/m-{tag}.db", storage=f"{tmp}/st-{tag}", verbose=0)
    total = time.perf_counter() - t0  # as `trials run` pays it: Ray's start and shutdown included
    ph, ends, (first, last) = out["phases_s"], out["phase_ends"], out["trial_bounds"]
    ray_start = ph["ray_start"]
    # the sweep's own set-up and end: corpus hash for the target address, MLflow experiment
    # and parent (their tables created while Ray starts), Tune's start and stop, Ray's shutdown
    around = total - ray_start - (last - first)
    parts = {"targets": ph["targets"], "store": ph["store"], "tune_start": first - ends["store"],
             "tune_end": ends["tune"] - last, "close": ph["close"], "ray_shutdown": ph.get("ray_shutdown", 0.0)}
    df = out["results"].get_dataframe()
    t0 = time.perf_counter()
    from analysis.attribution import analyse
    from analysis.load import load_runs
    from analysis.anova import AnalysisError

    try:
        analyse(load_runs(s.name, f"sqlite:///{tmp}/m-{tag}.db"), ["tf/tau", "spec/tau"], list(s.factors))
    except AnalysisError:  # one replicate of a 2x2 leaves no residual: timed all the same
        pass
    analysis_s = time.perf_counter() - t0
    wall = out["trial_wall_s"]
    return {"total": total, "ray_start": ray_start, "around": around, "parts": parts, "tracking": out["tracking_s"], "analysis": analysis_s,
            "wall": sum(wall.values()) / len(wall), "in_trainable": float(df["time_total_s"].mean()),
            "import": float(df["trial/import_s"].mean()), "report": float(df["trial/report_s"].mean()),
            "reports": float(df["training_iteration"].mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft-steps", type=int, default=600)
    ap.add_argument("--checkpoint-every-s", type=float, default=60.0,
                    help="the trials' checkpoint_every_s (0: a checkpoint at every eval)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = spec(args.draft_steps, args.checkpoint_every_s)
        target = Path(tmp) / "target.pt"
        train_shared_target(s.trials[0].config, target)
        loop, pool_s = plain(s, target, tmp)
        r = through_ray(s, target, tmp)
        warm = warm_ray(s, target, tmp)
    n = len(s.trials)
    actor = r["wall"] - r["in_trainable"]  # actor start, handing over, teardown: Tune's, not the trainer's
    per_trial = actor + r["report"] + r["tracking"] / n
    print(f"{n} tiny trials ({args.draft_steps} draft steps each, checkpoint_every_s {args.checkpoint_every_s:g}), "
          f"parallelism {PARALLEL}, one thread each")
    print(f"plain loop              {loop:7.1f} s  -> loop / {PARALLEL} = {loop / PARALLEL:.1f} s")
    print(f"2 plain processes       {pool_s:7.1f} s  (what {PARALLEL} cores give without Ray: {loop / pool_s:.2f}x)")
    print(f"Ray Tune + MLflow       {r['total']:7.1f} s")
    print("where Ray's extra time goes (seconds; per sweep, or mean per trial):")
    print(f"  Ray start (per sweep)                    {r['ray_start']:6.2f}")
    print("  shared-target task                         0.00  (reused from storage; its training is common to both)")
    p = r["parts"]
    print(f"  sweep set-up and end                     {r['around']:6.2f} per sweep:")
    print(f"    target addressing (corpus hash)        {p['targets']:6.2f}")
    print(f"    MLflow parent, git, sweep files        {p['store']:6.2f}")
    print(f"    Tune start, to the first trial's start {p['tune_start']:6.2f}")
    print(f"    Tune end, after the last trial's end   {p['tune_end']:6.2f}")
    print(f"    closing the parent run                 {p['close']:6.2f}")
    print(f"    Ray shutdown                           {p['ray_shutdown']:6.2f}")
    print(f"  trial actor start, handover, teardown    {actor:6.2f} per trial (driver wall {r['wall']:.1f} s "
          f"- in trainable {r['in_trainable']:.1f} s)")
    print(f"  imports in the trial's worker            {r['import']:6.2f} per trial (a plain process pays them too)")
    print(f"  checkpoint persistence in tune.report    {r['report']:6.2f} per trial ({r['reports']:.0f} reports)")
    print(f"  MLflow logging in the driver             {r['tracking']:6.2f} per sweep ({r['tracking'] / n:.2f} per trial)")
    print(f"  analysis of the result (load + ANOVA)    {r['analysis']:6.2f} per sweep (after the sweep, not timed above)")
    print(f"overhead vs loop/{PARALLEL}       {100 * (r['total'] / (loop / PARALLEL) - 1):+7.1f} %")
    print(f"with Ray already running (`ray start`, then `trials run --address`): {warm['total']:.1f} s, "
          f"{100 * (warm['total'] / pool_s - 1):+.1f} % vs 2 processes (no Ray start or shutdown in the sweep)")
    print(f"overhead vs 2 processes {100 * (r['total'] / pool_s - 1):+7.1f} %   (goal <= 15%, stretch 5%)")
    print(f"fixed cost per trial    {per_trial:7.2f} s   (goal <= 2 s)")


def warm_ray(s, target: Path, tmp: str) -> dict:
    """The same sweep on a Ray started beforehand and left running, as a cluster is."""
    import ray

    runner._init_ray(None)  # the local Ray `trials run` would start, bound to loopback
    try:
        return through_ray(s, target, tmp, tag="warm")
    finally:
        ray.shutdown()


def _one_thread_train(config: dict) -> None:
    torch.set_num_threads(1)
    train(config)


if __name__ == "__main__":
    main()
