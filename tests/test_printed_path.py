"""From "undecided" to a decision by the commands the tool prints, on a timed response: a
screening timed by `trials time`, `analysis plan --confirm norm --response train/step_ms`, then
exactly the command it prints, run as printed from the user's folder (the default store and
storage there), to a verdict with no manual step: the augment times each block itself before
each look, as the screening was timed. The workload is the tests' timed toy, whose timing pass
counts instead of reading the clock, so the path is the same on any machine however loaded;
`tests/trials/test_timing.py` times DSpark for real."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _run(cwd: Path, line: str) -> subprocess.CompletedProcess:
    """One printed command, as a user's shell would run it (the tool's own console scripts)."""
    argv = shlex.split(line)
    module = {"trials": "trials.cli", "analysis": "analysis.cli"}[argv[0]]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=1800)


def test_a_timed_confirmation_runs_to_a_verdict_by_the_printed_commands(tmp_path):
    spec = {"name": "screen", "workload": "tests.toy.workload:TIMED", "replicates": 2, "max_concurrent": 2,
            "base": {"steps": 20, "eval_interval": 10},
            "factors": {"norm": {"none": {"norm": "none"}, "layer": {"norm": "layer"}},
                        "smooth": {"off": {"label_smoothing": 0.0}, "on": {"label_smoothing": 0.1}}},
            "responses": {"train/step_ms": {"better": "lower", "margin": 0.5}}}
    (tmp_path / "screen.yaml").write_text(yaml.safe_dump(spec))
    for line in ("trials run screen.yaml", "trials time screen --rounds 3 --steps 5"):
        r = _run(tmp_path, line)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
    r = _run(tmp_path, "analysis plan screen --confirm norm --response train/step_ms --spec screen.yaml")
    assert r.returncode == 0, r.stderr[-2000:]
    said = r.stdout
    assert "timed as the screening was (rounds 3, warmup 1, steps 5, seed 0" in said, said
    printed = re.search(r"run it: (.+)$", said, re.M).group(1)
    assert printed == ("trials run screen-confirm-norm.yaml && trials augment screen-confirm-norm --until-decided"), said
    conf = yaml.safe_load((tmp_path / "screen-confirm-norm.yaml").read_text())
    assert conf["timing"] == {"rounds": 3, "warmup": 1, "steps": 5, "seed": 0}
    outs = []
    for line in printed.split(" && "):  # exactly as printed, each after the last succeeded
        r = _run(tmp_path, line)
        outs.append(r.stdout + r.stderr)
        assert r.returncode == 0, (line, outs[-1][-3000:])
    augment = outs[-1]
    assert "cannot be analysed yet" not in augment and "run `trials time" not in augment, augment[-3000:]
    assert "timing" in augment  # it timed the blocks itself
    assert "stop: every term of the family is decided" in augment, augment[-3000:]
    r = _run(tmp_path, "analysis report screen-confirm-norm")
    assert r.returncode == 0, r.stderr[-2000:]
    row = next(x for x in r.stdout.splitlines() if x.strip().startswith("norm "))
    assert "undecided" not in row and ("negligible" in row or "matters" in row), r.stdout[-3000:]
    # the report again, once more re-timed: never locked out of its own record
    r = _run(tmp_path, "trials time screen-confirm-norm --again --seed 1")
    assert r.returncode == 0, r.stderr[-2000:]
    r = _run(tmp_path, "analysis report screen-confirm-norm")
    assert r.returncode == 0, r.stderr[-2000:]
    assert row.split()[1] in r.stdout and "shown as recorded" in r.stdout, r.stdout[-3000:]
