"""Every script in bench/ runs, at its smallest size, so that none can rot unseen (one
failed at once for months: it patched a function that had moved). Each runs as a user
runs it, `python bench/NAME.py ...`, from an empty folder, and must print the line its
reader looks for. The three not run here run in the tests named in RUN_ELSEWHERE."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# name -> (its smallest arguments, text its output must hold); "{tmp}" is the test's folder
SMALLEST = {
    "analysis_blocks": (["--blocks", "3"], "3 blocks (   24 runs): report"),
    "analysis_scale": (["--runs", "24", "--keep", "{tmp}/store"], "analysis.sweep_reader.load_runs"),
    "aux_step": (["--repeats", "2", "--d-model", "32", "--seq-len", "32"], "of pure CE"),
    "bpb_noise": (["--settings", "tiny400", "--seeds", "2", "--steps-scale", "0.05", "--out", "{tmp}/noise"],
                  "tiny400"),
    "error_rates": (["--studies", "10", "--check"], "the default rule (own)"),
    "eta": (["{tmp}/run.log"], "predicted / actual total time"),
    "items_read": (["--runs", "4", "--repeats", "1"], "same frame: yes"),
    "reading_commands": (["--repeats", "1"], "trials validate"),
    "speculative": (["--preset", "tiny", "--prompts", "2", "--repeats", "1", "--new-tokens", "8",
                     "--set", "target_steps=20", "--set", "draft_steps=20"], "greedy   tau"),
    "sweep_overhead": (["--draft-steps", "10", "--target-steps", "10"], "fixed cost per trial"),
    "train_step": (["--preset", "tiny", "--repeats", "2"], "target stage tokens/s"),
}
RUN_ELSEWHERE = {  # name -> the test that runs its main
    "gpu_check": "tests/test_gpu_check.py",
    "gpu_study": "tests/test_gpu_study.py",
    "timing_pass": "tests/trials/test_timing.py",
}
ETA_LOG = ("shared target ab: trained in 36 s\n"
           "[s 1/2 done 1m00s, ~1m00s left] finished a r0\n"
           "[s 2/2 done 2m30s] finished b r0\n")


def test_every_bench_is_run_by_a_test():
    scripts = {p.stem for p in (ROOT / "bench").glob("*.py")}
    assert scripts == set(SMALLEST) | set(RUN_ELSEWHERE), "a bench script no test runs (or a test of none)"
    for name, test in RUN_ELSEWHERE.items():
        assert f"{name}.py" in (ROOT / test).read_text(), f"{test} does not run bench/{name}.py"


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_the_bench_runs_at_its_smallest_size(name, tmp_path):
    args, expected = SMALLEST[name]
    (tmp_path / "run.log").write_text(ETA_LOG)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *argv], cwd=tmp_path,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert expected in r.stdout, r.stdout[-2000:]
