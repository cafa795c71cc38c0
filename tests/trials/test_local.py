"""`trials run --local`: a sweep's design with torch alone, to a parquet that analysis reads
as it reads a Ray sweep's export."""

import subprocess
import sys
from pathlib import Path

import pandas as pd

from analysis.sweep_reader import load_runs, read_parquet
from analysis.report import build_report
from tests.conftest import is_timing_metric
from tests.trials.conftest import D1_D9, write_spec
from trials import runner, validate
from trials.local import run_local

ROOT = Path(__file__).resolve().parents[2]
QUICK = {"target_steps": 8, "draft_steps": 6, "eval_interval": 3, "eval_batches": 1, "spec_prompts": 2,
         "spec_new_tokens": 16, "spec_prompt_len": 16, "max_corpus_bytes": 300_000, "spec_interval_prompts": 0}


def test_local_run_matches_a_ray_sweep_of_the_same_spec(ray_local, tmp_path, corpus_dir):
    path = write_spec(tmp_path / "s.yaml", corpus_dir, "same", D1_D9, base=QUICK, replicates=2,
                      responses={"tf/tau": {"margin": 0.05}})
    spec = validate.load_spec(path)
    out = tmp_path / "runs.parquet"
    said = []
    local = run_local(spec, out, tmp_path / "local-st", deadline_s=0.0, say=said.append)  # stops after one
    assert len(local.runs) == 1 and len(read_parquet(out).runs) == 1 and "stopping before" in said[-1]
    first = read_parquet(out).runs.iloc[0]
    local = run_local(spec, out, tmp_path / "local-st", say=said.append)  # resumes: the other seven
    assert len(local.runs) == 8
    sweep = read_parquet(out)
    back = sweep.runs
    assert back.loc[back["run_id"] == first["run_id"], "run_s"].item() == first["run_s"]  # not rerun
    assert sweep.factors == ["D1", "D9"] and list(back["D1"].cat.categories) == list(spec.factors["D1"])
    assert sorted(back["run_order"]) == list(range(8)) and sweep.record.responses["tf/tau"]["margin"] == 0.05
    assert {(r.cell, r.run_order) for r in back.itertuples()} == {(t.cell, t.run_order) for t in spec.trials}

    runner.run(spec, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}", storage=str(tmp_path / "st"), verbose=0)
    ray_sweep = load_runs("same", f"sqlite:///{tmp_path / 'm.db'}")
    key = ["cell", "replicate"]
    a, b = back.set_index(key).sort_index(), ray_sweep.runs.set_index(key).sort_index()
    metrics = [c for c in a.columns if "/" in c and not is_timing_metric(c) and c in b.columns]
    assert "tf/tau" in metrics and "spec/tau" in metrics and "val/bpb" in metrics
    pd.testing.assert_frame_equal(a[metrics], b[metrics], check_dtype=False)
    assert (a["seed"] == b["seed"]).all()
    # the same analysis: the same verdicts with the same estimates
    va = build_report(sweep, None).decision.table()
    vb = build_report(ray_sweep, None).decision.table()
    cols = ["response", "term", "verdict", "estimate", "ci_low", "ci_high"]
    pd.testing.assert_frame_equal(va[va["response"] == "tf/tau"][cols].reset_index(drop=True),
                                  vb[vb["response"] == "tf/tau"][cols].reset_index(drop=True))


def test_the_local_command_imports_neither_ray_nor_mlflow(tmp_path, corpus_dir):
    path = write_spec(tmp_path / "s.yaml", corpus_dir, "bare", {"D1": D1_D9["D1"]}, base=QUICK)
    out = tmp_path / "bare.parquet"
    probe = ("import sys\nfrom trials.cli import main\n"
             f"rc = main(['run', {str(path)!r}, '--local', '--out', {str(out)!r}, '--storage', {str(tmp_path)!r}])\n"
             "print('loaded:', sorted(m for m in ('ray', 'mlflow') if m in sys.modules), 'rc', rc)")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert "loaded: [] rc 0" in r.stdout, r.stdout[-2000:] + r.stderr[-3000:]
    assert "analysis report bare --parquet" in r.stdout
    assert len(read_parquet(out).runs) == 2
    bad = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(path), "--local"], cwd=tmp_path,
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert bad.returncode == 2 and "--local: give --out" in bad.stderr and bad.stderr.count("\n") == 1


def test_a_local_rerun_of_an_edited_spec_is_refused_before_any_work(tmp_path):
    """`trials run --local --out` of a spec whose base changed since its finished rows: refused
    in one line naming the setting, the parquet as it was (it once finished the sweep with 1
    run at the new settings beside 3 at the old, and the report said nothing)."""
    import yaml

    raw = yaml.safe_load((ROOT / "examples" / "mlp.yaml").read_text())
    raw.update(replicates=1, factors={"decay": raw["factors"]["decay"]}, base={"steps": 50})
    raw.pop("sequential")
    path = tmp_path / "mlp.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "runs.parquet"
    said = []
    spec = validate.load_spec(path)
    run_local(spec, out, tmp_path / "st", deadline_s=0.0, say=said.append)  # one of the two
    before = out.read_bytes()
    raw["base"] = {"steps": 100}
    path.write_text(yaml.safe_dump(raw))
    import pytest

    with pytest.raises(ValueError, match=r"ran with steps 50, the spec now gives 100") as e:
        run_local(validate.load_spec(path), out, tmp_path / "st", say=said.append)
    assert "\n" not in str(e.value) and out.read_bytes() == before
    assert len(run_local(spec, out, tmp_path / "st", say=said.append).runs) == 2  # as it was: resumes
