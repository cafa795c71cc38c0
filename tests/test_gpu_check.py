"""bench/gpu_check.py, the one script a GPU machine runs, on CPU with the tiny preset so
that it cannot rot between GPU sessions."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_on_cpu(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--target-steps", "10",
                        "--draft-steps", "10"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    for needle in ("target stage: 10 steps", "tokens/s, MFU", "draft stage: 10 steps", "speculative sampled: tau",
                   "speculative greedy: tau", "speedup", "sps table: ", "gpu_check: done"):
        assert needle in out, out
    # the SPS table it writes is a curve a run can name (sched_curve: table:<path>)
    from dspark.curves import measure_grid, read_sps_table

    table, meta = read_sps_table(tmp_path / "bench" / "out" / "gpu_check" / "sps_table.json")
    assert sorted(table) == measure_grid(64 * 8) and all(v > 0 for v in table.values())
    assert meta["preset"] == "tiny" and meta["context_len"] == 16
    # torch alone: running it loads neither Ray nor MLflow
    probe = ("import runpy, sys\nsys.argv = ['gpu_check', '--help']\ntry:\n"
             f"    runpy.run_path({str(ROOT / 'bench' / 'gpu_check.py')!r}, run_name='__main__')\n"
             "except SystemExit:\n    pass\nprint(sorted(m for m in ('ray', 'mlflow') if m in sys.modules))")
    mods = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert mods.stdout.strip().endswith("[]"), mods.stdout + mods.stderr
