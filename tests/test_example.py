"""The example a user copies (examples/mlp_sweep.py, a workload of the four core attributes
alone, in at most 40 lines, and examples/mlp.yaml) through every command, on real Ray and
MLflow, from a folder of the user's own (the workload is found beside it): validate, run,
resume (nothing reruns), status, the timing pass refused in one line, the report and the
notebook, `trials run --local` and the report of its parquet."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _cli(cwd, *args, package="trials"):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DSPARK_SWEEPS_WORKLOADS")}
    return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_forty_line_example_goes_through_every_command(tmp_path):
    code = (ROOT / "examples" / "mlp_sweep.py").read_text()
    assert len(code.splitlines()) <= 40 and "name" in code and "metrics" in code
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # the user's own folder
    v = _cli(tmp_path, "validate", "examples/mlp.yaml")
    assert v.returncode == 0 and "4 cells x 3 replicates = 12 trials" in v.stdout, v.stdout + v.stderr
    assert "val/mse (lower is better, margin +-0.005)" in v.stdout  # the margin the workload gives
    store = ["--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}", "--storage", str(tmp_path / "st")]
    r = _cli(tmp_path, "run", "examples/mlp.yaml", *store)
    assert r.returncode == 0 and "12 finished, 0 failed" in r.stdout, (r.stdout + r.stderr)[-3000:]
    again = _cli(tmp_path, "resume", "mlp", *store[2:])
    assert again.returncode == 0 and "finished" not in again.stdout.split("mean per arm")[0].replace(
        "12 finished", ""), again.stdout[-2000:]  # nothing trained again
    s = _cli(tmp_path, "status", "mlp", "--storage", str(tmp_path / "st"))
    assert s.returncode == 0 and s.stdout.count("finished") >= 12, s.stdout
    t = _cli(tmp_path, "time", "mlp", "--storage", str(tmp_path / "st"))
    assert t.returncode == 2 and t.stderr.strip().endswith("has no timing pass"), t.stderr
    a = _cli(tmp_path, "report", "mlp", *store[:2], "--out", str(tmp_path / "rep"), package="analysis")
    assert a.returncode == 0 and "val/mse (lower is better; margin +-0.005)" in a.stdout, a.stdout + a.stderr
    assert "decay" in a.stdout and "norm" in a.stdout
    # the notebook works where the report does, for the user's own workload, and runs nothing from the data:
    # a pandas.py in the study's output folder (a received study's reports/NAME/) is never imported
    planted = tmp_path / "planted"
    (tmp_path / "rep" / "mlp" / "pandas.py").write_text(f"open({str(planted)!r}, 'w').write('ran')\n")
    nb = _cli(tmp_path, "notebook", "attribution", "mlp", *store[:2], "--out", str(tmp_path / "rep"), package="analysis")
    assert nb.returncode == 0, (nb.stdout + nb.stderr)[-3000:]
    assert "val/mse" in nb.stdout and not planted.exists()
    # its held-out errors (`report(..., items=)`): one artifact per run, not metrics, and the planner prices items
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store[1])
    kids = [r for r in client.search_runs([client.get_experiment_by_name("mlp").experiment_id])
            if r.data.tags.get("trial_key")]
    assert len(kids) == 12 and not any(k.startswith(("jack/", "split/")) for r in kids for k in r.data.metrics)
    assert all("items.json" in {f.path for f in client.list_artifacts(r.info.run_id)} for r in kids)
    plan = _cli(tmp_path, "plan", "mlp", *store[:2], package="analysis")
    assert plan.returncode == 0 and "items alone" in plan.stdout and "no jackknife records" not in plan.stdout, \
        plan.stdout + plan.stderr
    local = _cli(tmp_path, "run", "examples/mlp.yaml", "--local", "--out", str(tmp_path / "local.parquet"),
                 "--storage", str(tmp_path / "st-local"))
    assert local.returncode == 0, (local.stdout + local.stderr)[-3000:]
    p = _cli(tmp_path, "report", "mlp", "--parquet", str(tmp_path / "local.parquet"), "--out", str(tmp_path / "rep2"),
             package="analysis")
    assert p.returncode == 0 and "val/mse" in p.stdout and "12 finished factorial runs" in p.stdout, p.stdout + p.stderr
    # every command these printed is whole on one line, and its --help runs
    from tests.analysis.test_commands import assert_helps_run, whole_commands

    out = "\n".join(c.stdout + c.stderr for c in (v, r, again, s, t, a, plan, local, p))
    seen = whole_commands(out)
    assert any(c.startswith("analysis ") for c in seen), seen
    assert_helps_run(seen)
    from analysis.sweep_reader import read_parquet

    assert read_parquet(tmp_path / "local.parquet").record.workload == "examples.mlp_sweep:WORKLOAD"
