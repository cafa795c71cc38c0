"""How long the reading commands take to answer (issue: each under 2 s on this machine):
`trials status`, `trials list`, `trials validate` and `analysis plan`, on a small sweep
written into a fresh SQLite store and storage folder through the trials' own Ledger.

Prints, per command, the median wall time of a few runs and its ratio to the 2 s target and
to the floor any command reading the store pays, measured in the same run (this machine is
shared and noisy): MLflow's own client on the same store, imported and asked one question.

    .venv/bin/python bench/reading_commands.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 2.0
FACTORS = {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
           "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}}}


def build(folder: Path) -> tuple[str, Path, Path]:
    """A finished 2x2 sweep with 3 replicates: (store URI, storage folder, spec file)."""
    import numpy as np
    import yaml

    from trials.runner import _save_sweep_files
    from trials.spec import load
    from trials.tracking import Ledger

    spec_file = folder / "bench.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "bench", "base": {"preset": "tiny"}, "factors": FACTORS,
                                         "replicates": 3}))
    spec = load(spec_file)
    uri = f"sqlite:///{folder / 'm.db'}"
    ledger = Ledger(uri, spec)
    rng = np.random.default_rng(0)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {})
        y = 3.0 + 0.5 * (t.levels["D1"] == "aligned") + rng.normal(0, 0.05)
        ledger.log_metrics(run_id, {"spec/tau": y, "tf/tau": y + 0.5, "tf/conf_ece": 0.05, "spec/speedup": 1.2},
                           step=10)
        ledger.finish(run_id, "FINISHED")
    ledger.finish(ledger.parent_id, "FINISHED")
    storage = folder / "st"
    (storage / "bench").mkdir(parents=True)
    _save_sweep_files(storage / "bench", spec, uri, None)
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
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        uri, storage, spec_file = build(Path(tmp))
        commands = {
            "trials status": [py, "-m", "trials.cli", "status", "bench", "--storage", str(storage)],
            "trials list": [py, "-m", "trials.cli", "list", "--storage", str(storage)],
            "trials validate": [py, "-m", "trials.cli", "validate", str(spec_file)],
            "analysis plan": [py, "-m", "analysis.cli", "plan", "bench", "--tracking-uri", uri],
        }
        floor = timed([py, "-c", "from mlflow.tracking import MlflowClient\n"
                       f"MlflowClient({uri!r}).search_experiments(max_results=1)"], args.repeats)
        print(f"the floor, MLflow's client on this store and one query: {floor:.2f} s (median of {args.repeats})")
        for name, cmd in commands.items():
            s = timed(cmd, args.repeats)
            print(f"{name:16s} {s:5.2f} s   {s / TARGET_S:4.2f}x the 2 s target   {s / floor:4.2f}x the floor")


if __name__ == "__main__":
    main()
