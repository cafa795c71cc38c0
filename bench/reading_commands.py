"""How long the reading commands take to answer (issue: each under 2 s on this machine):
`trials status`, `trials list` (from storage and from a store), `trials validate` and
`analysis plan`, on the demo's sweep with 3 replicates written into a fresh SQLite store
(through the trials' own Ledger) and a storage folder as Tune leaves it (each trial's folder
and result file, `trials.layout`); with `--store URI --sweep NAME`, `plan` on an existing
sweep as well (the paper study's, say).

Prints, per command, the median wall time of a few runs and its ratio to the 2 s target,
beside two references measured in the same run (this machine is shared and noisy): MLflow's
own client imported and asked one question (what a command pays that reads a SQLite store:
`trials status` and `list` answer from storage instead), and importing the statistics `plan`
needs (statsmodels), which no plan can go below.

    .venv/bin/python bench/reading_commands.py [--repeats 3] [--store URI --sweep NAME]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from trials.store.keys import DONE_KEY
from trials.store.items import split_name
from trials import layout

ROOT = Path(__file__).resolve().parents[1]

TARGET_S = 2.0


def build(folder: Path) -> tuple[str, Path, Path]:
    """The demo's sweep (sweeps/demo.yaml: D1 x D2 x D9, its three primary responses) with 3
    replicates, as a finished sweep would leave it: every trial's responses and their prompt
    groups, so that `plan` runs every part it has (the verdicts, more blocks, more prompts).
    Returns (store URI, storage folder, spec file)."""
    import numpy as np
    import yaml

    import json

    from trials.saved import save_sweep_files
    from trials.validate import load_spec
    from trials.tracking import open_ledger

    raw = yaml.safe_load((ROOT / "sweeps" / "demo.yaml").read_text())
    raw.update(name="bench", replicates=3)
    spec_file = folder / "bench.yaml"
    spec_file.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_file)
    uri = f"sqlite:///{folder / 'm.db'}"
    ledger = open_ledger(uri, spec)
    rng = np.random.default_rng(0)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {})
        tau = 3.0 + 0.3 * (t.levels["D1"] == "aligned") + 0.05 * (t.levels["D9"] == "markov")
        values = {"spec/tau": tau, "spec/speedup": 1.2 + tau / 20, "conf/ece_mean": 0.05, "tf/tau": tau + 0.5}
        point = {"split/prompts": 24.0, "split/decode_s_per_prompt": 0.5}
        for r, v in values.items():
            groups = v + rng.normal(0, 0.03, 4)
            point[r] = float(groups.mean())
            point.update({split_name(r, g): float(x) for g, x in enumerate(groups)})
        ledger.log_metrics(run_id, point, step=500)
        ledger.finish(run_id, "FINISHED")
        trial_dir = folder / "st" / "bench" / layout.trial_dirname(f"bench_{t.run_order:05d}", t.key)
        trial_dir.mkdir(parents=True)
        (trial_dir / layout.RESULT_FILE).write_text(json.dumps({**point, "step": 500}) + "\n" +
                                                    json.dumps({**point, "step": 500, DONE_KEY: 1.0}) + "\n")
    ledger.finish(ledger.parent_id, "FINISHED")
    storage = folder / "st"
    save_sweep_files(storage / "bench", spec, uri, None)
    layout.save_experiment(storage / "bench", ledger.experiment_id, ledger.parent_id,
                           lambda path, text: path.write_text(text))
    return uri, storage, spec_file


def timed(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr[-500:]}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--store", help="an existing store to time `plan` on too (with --sweep)")
    ap.add_argument("--sweep", help="the sweep in --store")
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        uri, storage, spec_file = build(Path(tmp))
        commands = {
            "trials status": [py, "-m", "trials.cli", "status", "bench", "--storage", str(storage)],
            "trials list": [py, "-m", "trials.cli", "list", "--storage", str(storage)],
            "trials list --tracking-uri": [py, "-m", "trials.cli", "list", "--tracking-uri", uri],
            "trials validate": [py, "-m", "trials.cli", "validate", str(spec_file)],
            "analysis plan": [py, "-m", "analysis.cli", "plan", "bench", "--tracking-uri", uri],
        }
        if args.store and args.sweep:
            commands[f"analysis plan {args.sweep}"] = [py, "-m", "analysis.cli", "plan", args.sweep,
                                                       "--tracking-uri", args.store]
        mlflow_s = timed([py, "-c", "from trials.store.client import tracking_client\n"
                          f"tracking_client({uri!r}).search_experiments(max_results=1)"], args.repeats)
        stats_s = timed([py, "-c", "import pandas, statsmodels.formula.api"], args.repeats)
        print(f"references (median of {args.repeats}): MLflow's client imported and asked one question "
              f"{mlflow_s:.2f} s; importing pandas and statsmodels {stats_s:.2f} s")
        for name, cmd in commands.items():
            s = timed(cmd, args.repeats)
            print(f"{name:28s} {s:5.2f} s   {s / TARGET_S:4.2f}x the 2 s target")


if __name__ == "__main__":
    main()
