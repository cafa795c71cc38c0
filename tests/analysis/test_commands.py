"""Every command the tool prints is on one line, whole, and copyable: read back from the
committed studies' answers, their plans and a recap, each is on a single line and its
command's `--help` runs."""

import re
from pathlib import Path

import pytest

from analysis.sweep_reader import read_parquet
from analysis.plan import plan_text
from analysis.text import COMMAND
from analysis.report import build_report

ROOT = Path(__file__).resolve().parents[2]
STUDIES = [ROOT / "results" / n / "runs.parquet" for n in ("seed-backbone", "paper-drafter", "paper-drafter-v1")]


def _texts():
    for path in STUDIES:
        sweep = read_parquet(path)
        rep = build_report(sweep, None)
        yield rep.brief
        yield plan_text(sweep, None)


def whole_commands(text: str) -> set[str]:
    """The commands a text prints, each checked to lie whole on one of its lines."""
    lines = text.splitlines()
    whole = " ".join(" ".join(line.split()) for line in lines)  # as a reader joins wrapped lines
    on_lines = {m.group() for line in lines for m in COMMAND.finditer(" ".join(line.split()))}
    seen = set()
    for m in COMMAND.finditer(whole):
        assert m.group() in on_lines, f"broken across lines: {m.group()!r}"
        seen.add(m.group())
    return seen


def assert_helps_run(commands: set[str]) -> None:
    """`--help` of each command's subcommand exits 0."""
    from analysis.cli import main as analysis
    from trials.cli import main as trials

    for command in sorted({" ".join(c.split()[:2]) for c in commands if c.split()[0] in ("trials", "analysis")}):
        tool, sub = command.split()
        with pytest.raises(SystemExit) as e:
            {"trials": trials, "analysis": analysis}[tool]([sub, "--help"])
        assert e.value.code == 0, command


def test_every_printed_command_is_whole_on_one_line_and_its_help_runs(capsys):
    seen = set().union(*(whole_commands(text) for text in _texts()))
    assert any(c.startswith("trials augment") for c in seen) and any(c.startswith("analysis plan") for c in seen)
    assert_helps_run(seen)
    assert re.search(r"usage: ", capsys.readouterr().out)
