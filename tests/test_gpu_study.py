"""bench/gpu_study.py, the one GPU run, on CPU with the tiny preset: it runs the GPU
figures and the D1 x D2 x D9 study, writes a parquet that `analysis report --parquet` reads,
and loads neither Ray nor MLflow. Sized by steps (`--draft-steps`), not by the clock: a
loaded machine once stopped it with "no time left" (no test depends on the machine's speed)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_study_runs_on_cpu(tmp_path):
    out = tmp_path / "out"
    probe = ("import runpy, sys\n"
             f"sys.argv = ['gpu_study', '--cpu', '--out', {str(out)!r}, '--draft-steps', '6']\n"
             "try:\n"
             f"    runpy.run_path({str(ROOT / 'bench' / 'gpu_study.py')!r}, run_name='__main__')\n"
             "except SystemExit as e:\n    print('exit', e.code)\n"
             "print('loaded:', sorted(m for m in ('ray', 'mlflow') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert "loaded: []" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    log = (out / "gpu_study.log").read_text()
    for needle in ("gpu_check: target stage", "gpu_check: speculative greedy: tau", "probe: 6 drafter steps",
                   "sizing: fixed at 6 drafter steps each for 16 trials", "gpu_study: done"):
        assert needle in log, log
    from analysis.sweep_reader import read_parquet
    from analysis.report import build_report

    sweep = read_parquet(out / "runs.parquet")
    df = sweep.runs
    assert len(df) == 16 and set(sweep.factors) == {"D1", "D2", "D9"}  # 2^3 cells x 2 replicates
    assert sweep.record.responses["spec/tau"]["margin"] == 0.1
    # the timed primary response comes from the interleaved pass after the trials, in-process
    assert df["spec/speedup"].notna().all() and set(df["timing/rounds"]) == {3.0}
    rep = build_report(sweep, None)
    assert "spec/tau (+-0.1)" in rep.summary


def test_gpu_study_drafts_for_an_hf_target_and_times_it(tmp_path):
    """`--target hf`: the same study drafting for an HF causal LM built in code (qwen3-tiny on
    CPU; Qwen3-0.6B's shape on a GPU), its shared target trained once, every trial finished,
    and the timing pass's spec/speedup measured on it (decoding both ways on the HF target)."""
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_study.py"), "--cpu", "--target", "hf", "--out", str(out),
                        "--draft-steps", "4", "--skip-check"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    from analysis.sweep_reader import read_parquet
    from analysis.report import build_report

    sweep = read_parquet(out / "runs.parquet")
    df = sweep.runs
    assert len(df) == 16 and set(df["target_model"]) == {"qwen3-tiny"} and set(df["n_layers"]) == {4}
    assert df["spec/speedup"].notna().all() and set(df["timing/rounds"]) == {3.0} and (df["spec/tau"] >= 1).all()
    assert "spec/tau (+-0.1)" in build_report(sweep, None).summary
