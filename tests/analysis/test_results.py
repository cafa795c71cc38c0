"""The committed study reports are what today's renderer makes of their committed runs
(`make results` rebuilds them): the verdict table of report.html, each cell's text and its
colour class, and the summary's verdict table."""

import html
import re
from pathlib import Path

import pytest

from analysis.results import rebuild, study_folders

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = study_folders(ROOT / "results")


def verdict_cells(report: str) -> list[tuple[str, str, str]]:
    """(term, colour class, text) of every cell of the report's verdict table."""
    table = re.search(r"<table class='t verdicts'>(.*?)</table>", report, re.S)
    assert table, "no verdict table"
    out = []
    for row in re.findall(r"<tr><th>(.*?)</th>(.*?)</tr>", table.group(1), re.S):
        for cls, text in re.findall(r"<td(?: class='([^']*)')?[^>]*>(.*?)</td>", row[1], re.S):
            out.append((html.unescape(row[0]), cls, html.unescape(text)))
    return out


def verdict_block(summary: str) -> str:
    return summary.split("verdicts (estimate", 1)[1].split("\none alpha", 1)[0]


def test_there_are_committed_studies():
    assert len(FOLDERS) >= 2, FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_a_committed_report_is_what_the_renderer_makes_of_its_runs(folder, tmp_path):
    fresh = tmp_path / folder.name
    fresh.mkdir()
    (fresh / "runs.parquet").write_bytes((folder / "runs.parquet").read_bytes())
    rebuild(fresh)
    committed = verdict_cells((folder / "report.html").read_text())
    assert committed and all(cls.startswith("v-") for _, cls, _ in committed)
    assert committed == verdict_cells((fresh / "report.html").read_text()), \
        f"{folder} is stale: run `make results`"
    assert verdict_block((folder / "summary.txt").read_text()) == verdict_block((fresh / "summary.txt").read_text())
