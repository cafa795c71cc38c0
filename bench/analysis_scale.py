"""Analysis at scale: 10,000 runs in a SQLite MLflow store. Prints the time to load them
(`analysis.sweep_reader.load_runs`) and to analyse three responses, as ratios to the time
`mlflow.search_runs` alone takes on the same store.

    python bench/analysis_scale.py [--runs 10000] [--keep STORE_DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import mlflow
import numpy as np
from mlflow.entities import Metric, Param, RunTag
from trials.store.client import tracking_client

from analysis.attribution import analyse
from analysis.sweep_reader import load_runs

LEVELS = {"D1": ("shifted", "aligned"), "D2": ("const4", "block"), "D9": ("hidden", "markov")}


def populate(uri: str, n: int) -> None:
    client = tracking_client(uri)
    exp = client.create_experiment("scale")
    parent = client.create_run(exp, run_name="sweep scale", tags={"sweep_parent": "true"}).info.run_id
    client.log_param(parent, "factors", '{"D1": {"shifted": {}, "aligned": {}}, "D2": {"const4": {}, "block": {}}, '
                                        '"D9": {"hidden": {}, "markov": {}}}')
    rng = np.random.default_rng(0)
    ts = int(time.time() * 1000)
    for i in range(n):
        lv = {f: LEVELS[f][(i >> k) & 1] for k, f in enumerate(LEVELS)}
        rep = i // 8
        tags = [RunTag("mlflow.parentRunId", parent), RunTag("trial_key", f"{i}"), RunTag("cell", "|".join(lv.values())),
                RunTag("replicate", str(rep)), RunTag("seed", str(rep))]
        tags += [RunTag(f"factor.{f}", v) for f, v in lv.items()]
        run = client.create_run(exp, run_name=f"r{i}")
        x = {f: 1.0 if v == LEVELS[f][1] else -1.0 for f, v in lv.items()}
        y = 3 + 0.5 * x["D1"] + 0.1 * x["D9"] + rng.normal(0, 0.1)
        metrics = [Metric("spec/tau", y, ts, 1), Metric("tf/tau", y + 0.2, ts, 1), Metric("conf/ece", 0.1 + rng.normal(0, 0.01), ts, 1)]
        params = [Param("window", "aligned" if x["D1"] > 0 else "shifted"), Param("block_size", "7")]
        client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=tags)
        client.set_terminated(run.info.run_id)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--keep", help="reuse / keep the store in this folder")
    args = ap.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{folder / 'scale.db'}"
    if not (folder / "scale.db").is_file():
        t0 = time.perf_counter()
        populate(uri, args.runs)
        print(f"logged {args.runs} runs in {time.perf_counter() - t0:.0f} s")
    mlflow.set_tracking_uri(uri)
    timings = {"search": [], "load": [], "analyse": []}
    for _ in range(3):
        t0 = time.perf_counter()
        raw = mlflow.search_runs(experiment_names=["scale"], max_results=100000)
        timings["search"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        sweep = load_runs("scale", uri)
        timings["load"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        analyse(sweep.runs, ["spec/tau", "tf/tau", "conf/ece"], sweep.factors, block=None)
        timings["analyse"].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) for k, v in timings.items()}
    print(f"{len(raw)} runs in the store, {len(sweep.runs)} loaded; medians of 3")
    print(f"mlflow.search_runs alone   {med['search']:7.2f} s   1.00")
    print(f"analysis.sweep_reader.load_runs    {med['load']:7.2f} s   {med['load'] / med['search']:.2f}")
    print(f"ANOVA+effects, 3 responses {med['analyse']:7.2f} s   {med['analyse'] / med['search']:.2f}")
    print(f"analysis adds {100 * (med['load'] + med['analyse'] - med['search']) / med['search']:+.0f}% to the load "
          "(goal < 50%)")


if __name__ == "__main__":
    main()
