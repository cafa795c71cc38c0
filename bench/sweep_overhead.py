"""Ray Tune + MLflow overhead: a small sweep through the real stack against the same
trials run one after another in a plain loop (dspark.train, no Ray, no tracking), the
loop's time divided by the sweep's parallelism.

    python bench/sweep_overhead.py [--draft-steps 600]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from dspark.train import train, train_shared_target
from trials import runner
from trials.spec import parse

PARALLEL = 2


def spec(draft_steps: int):
    return parse({
        "name": "overhead", "max_concurrent": PARALLEL, "replicates": 1,
        "base": {"preset": "tiny", "target_steps": 200, "draft_steps": draft_steps, "eval_interval": 50,
                 "spec_prompts": 4},
        "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
                    "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}}},
    })


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft-steps", type=int, default=600)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = spec(args.draft_steps)
        # the shared target is common to both paths: train it once, outside both timings
        target = Path(tmp) / "target.pt"
        train_shared_target(s.trials[0].config, target)
        # each Ray trial gets one CPU (one torch thread); the loop runs its trials the same way
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        t0 = time.perf_counter()
        for t in s.trials:
            train(t.config.replace(target_path=str(target), out_dir=f"{tmp}/loop/{t.replicate}"))
        loop = time.perf_counter() - t0
        torch.set_num_threads(threads)
        # the same trials in two plain processes at once: what the hardware gives in parallel
        import multiprocessing as mp

        jobs = [(t.config.replace(target_path=str(target), out_dir=f"{tmp}/pool/{i}").to_dict(),) for i, t in
                enumerate(s.trials)]
        t0 = time.perf_counter()
        with mp.get_context("spawn").Pool(PARALLEL) as pool:
            pool.starmap(_one_thread_train, jobs)
        pool_s = time.perf_counter() - t0
        s = spec(args.draft_steps)
        import shutil

        from dspark import targets

        h, _ = targets.address(s.trials[0].config)
        dest = targets.target_file(Path(tmp) / "st", h)
        dest.parent.mkdir(parents=True)
        shutil.copy(target, dest)
        t0 = time.perf_counter()
        runner.run(s, tracking_uri=f"sqlite:///{tmp}/m.db", storage=f"{tmp}/st", verbose=0)
        sweep = time.perf_counter() - t0
    ideal = loop / PARALLEL
    print(f"{len(s.trials)} tiny trials ({args.draft_steps} draft steps each), parallelism {PARALLEL}, one thread each")
    print(f"plain loop            {loop:7.1f} s  -> loop / {PARALLEL} = {ideal:.1f} s")
    print(f"2 plain processes     {pool_s:7.1f} s  (what {PARALLEL} cores give without Ray: {loop / pool_s:.2f}x)")
    print(f"Ray Tune + MLflow     {sweep:7.1f} s  (Ray start, trial actors, checkpoints, tracking)")
    print(f"overhead vs loop/{PARALLEL}     {100 * (sweep / ideal - 1):+7.1f} %   (goal < 15%)")
    print(f"overhead vs processes {100 * (sweep / pool_s - 1):+7.1f} %")


def _one_thread_train(config: dict) -> None:
    torch.set_num_threads(1)
    train(config)


if __name__ == "__main__":
    main()
