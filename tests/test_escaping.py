"""Text from a sweep leaves the tool escaped wherever it goes: control characters on the
terminal (`trials.store.client.terminal_text`, for every CLI's output and error lines),
Markdown and HTML in the notes MLflow renders (`trials.store.ui.md_text`), and Markdown
tables and code blocks in report.md."""

from mlflow.tracking import MlflowClient

from analysis.cli import main as analysis
from trials.cli import main as trials
from trials.store.client import terminal_text
from trials.store.keys import DESCRIPTION_TAG, NOTE_TAG, SWEEP_PARENT_TAG
from trials.store.ui import md_text

ESC = "\x1b]0;owned\x07\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\u202edesrever\r"


def test_terminal_text_shows_every_control_and_keeps_colours():
    shown = terminal_text(f"a{ESC}\x1b[1mbold\x1b[0m\n\tz")
    assert "\x1b]" not in shown and "\x07" not in shown and "\u202e" not in shown and "\r" not in shown
    assert "\\x1b]0;owned\\x07" in shown and "\\u202e" in shown and "\x1b[1mbold\x1b[0m\n\tz" in shown


def test_names_and_descriptions_from_a_store_reach_the_terminal_escaped(tmp_path, capsys):
    from tests.analysis.conftest import synthetic_sweep

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    synthetic_sweep(uri, failed=0)
    client = MlflowClient(uri)
    eid = client.get_experiment_by_name("synthetic").experiment_id
    parent = client.search_runs([eid], f"tags.{SWEEP_PARENT_TAG} = 'true'")[0]
    client.set_tag(parent.info.run_id, DESCRIPTION_TAG, f"the question {ESC}")
    other = client.create_experiment(f"odd{ESC}")
    client.create_run(other, tags={SWEEP_PARENT_TAG: "true"})
    assert trials(["list", "--tracking-uri", uri]) == 0
    assert analysis(["recap", "synthetic", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "\x1b]" not in out and "\x07" not in out and "\u202e" not in out and "\r" not in out
    assert "odd\\x1b]0;owned\\x07" in out and "the question \\x1b]0;owned" in out


def test_markdown_and_html_from_a_sweep_are_shown_literally_in_mlflow_notes(tmp_path):
    from trials.tracking import open_ledger
    from trials.validate import parse

    assert md_text("<img src=x onerror=alert(1)> [a](http://e) ![i](u) a|b") == \
        "&lt;img src=x onerror=alert(1)&gt; \\[a\\](http://e) \\!\\[i\\](u) a\\|b"
    spec = parse({"name": "note", "description": "<img src=x> [click](http://evil) **bold**",
                  "base": {"preset": "tiny"},
                  "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}})
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    ledger = open_ledger(uri, spec)
    client = MlflowClient(uri)
    note = client.get_run(ledger.parent_id).data.tags[NOTE_TAG]
    assert "<img" not in note and "&lt;img src=x&gt;" in note and "\\[click\\](http://evil)" in note
    assert "\\*\\*bold\\*\\*" in note
    assert "<img" not in client.get_experiment(ledger.experiment_id).tags[NOTE_TAG]


def test_report_md_keeps_every_cell_in_its_column(tmp_path):
    """Cell names hold `|` (`D1=a|D2=b`) and the summary may hold backticks: every row of
    every Markdown table has its header's columns, and no code block closes early."""
    import re
    from pathlib import Path

    from analysis.sweep_reader import read_parquet
    from analysis.report import build_report

    sweep = read_parquet(Path(__file__).resolve().parents[1] / "results" / "seed-backbone" / "runs.parquet")
    rep = build_report(sweep, tmp_path)
    bars = lambda line: len(re.findall(r"(?<!\\)\|", line))  # noqa: E731 (unescaped bars)
    header, named = None, False
    for line in rep.markdown_path.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        if header is None:
            header = bars(line)
        assert bars(line) == header, line
        named |= "D1=" in line and "\\|" in line
    assert named  # a row naming a cell, its bars escaped
