"""Reading a sweep whose runs keep their evaluation items in one artifact (`items.json`),
against the same sweep stored the old way (the items as `jack/` and `split/` metrics): two
SQLite stores of the same runs, each read by `analysis.sweep_reader.load_runs`. Prints both
medians and their ratio (artifact / metrics: at most 1 is "no slower"), and checks that both
give the same frame.

    python bench/items_read.py [--runs 24] [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from mlflow.entities import Metric, RunTag

from analysis.sweep_reader import load_runs
from trials.store.client import tracking_client
from trials.store.items import jack_name
from trials.store.keys import store_key
from trials.store.runs import log_metrics

# a DSpark drafter run's shape: 152 plain metrics; 7 responses x 16 groups + 4 x 16 decoded + counts
PLAIN = [f"tf/accept@{k}" for k in range(1, 8)] + [f"spec/m{i}" for i in range(60)] + [f"train/m{i}" for i in range(85)]
JACK = ["val/bpb", "tf/tau", "tf/ce", "tf/tv", "tf/conf_ece", "tf/conf_auroc", "tf/conf_brier",
        "spec/tau", "spec/speedup", "conf/ece", "sched/tau"]
COUNTS = {"split/prompts": 24.0, "split/timed_prompts": 24.0, "split/decode_s_per_prompt": 0.4,
          "split/eval_batches": 16.0}


def populate(uri: str, runs: int, as_metrics: bool) -> None:
    client = tracking_client(uri)
    exp = client.create_experiment("items")
    parent = client.create_run(exp, run_name="sweep items", tags={"sweep_parent": "true"}).info.run_id
    client.log_param(parent, "factors", '{"head": {"markov": {}, "rnn": {}}}')
    rng = np.random.default_rng(0)
    for i in range(runs):
        run = client.create_run(exp, run_name=f"r{i}").info.run_id
        head = ("markov", "rnn")[i % 2]
        client.log_batch(run, tags=[RunTag("mlflow.parentRunId", parent), RunTag("trial_key", str(i)),
                                    RunTag("cell", f"head={head}"), RunTag("replicate", str(i // 2)),
                                    RunTag("factor.head", head)])
        plain = {m: float(rng.normal()) for m in PLAIN + JACK}
        items = {**COUNTS, **{jack_name(r, g): float(rng.normal()) for r in JACK for g in range(16)}}
        if as_metrics:  # as runs were stored before the artifact
            ts = int(time.time() * 1000)
            log_metrics(client, run, plain, 1)
            client.log_batch(run, metrics=[Metric(store_key(k), v, ts, 1) for k, v in items.items()])
        else:
            log_metrics(client, run, {**plain, **items}, 1)
        client.set_terminated(run)


def timed_load(uri: str, repeats: int) -> tuple[float, object]:
    times, frame = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        frame = load_runs("items", uri).runs
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), frame


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="items-read-"))
    uris = {kind: f"sqlite:///{folder / f'{kind}.db'}" for kind in ("metrics", "artifact")}
    for kind, uri in uris.items():
        populate(uri, args.runs, as_metrics=kind == "metrics")
    timed_load(uris["metrics"], 1)  # imports and first connections paid once, outside the timing
    old, old_frame = timed_load(uris["metrics"], args.repeats)
    new, new_frame = timed_load(uris["artifact"], args.repeats)
    cols = sorted(c for c in old_frame.columns if c.startswith(("jack/", "split/")))
    same = cols == sorted(c for c in new_frame.columns if c.startswith(("jack/", "split/"))) and \
        np.allclose(old_frame.sort_values("run_name")[cols].to_numpy(float),
                    new_frame.sort_values("run_name")[cols].to_numpy(float))
    print(f"{args.runs} runs, {len(cols)} item columns each; load_runs, median of {args.repeats}")
    print(f"items as metrics (before)   {old:7.3f} s   1.00")
    print(f"items as one artifact       {new:7.3f} s   {new / old:.2f}")
    print(f"same frame: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
