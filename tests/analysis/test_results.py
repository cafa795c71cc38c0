"""The committed study reports are what today's renderer makes of their committed runs
(`make results` rebuilds them): the verdict table of report.html, each cell's text and its
colour class, and the summary's verdict table."""

import html
import re
from pathlib import Path

import pytest

from analysis.sweep_reader import read_parquet
from analysis.report import build_report
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


LINE = re.compile(r"^    (?P<term>\S+): (?P<state>matters, beyond the margin|matters, size unsure|negligible|undecided)"
                  r"(?: within \+-[\d.e+-]+)? \((?:[^:\[]*: )?(?P<est>[-+][\d.e+-]+) \[(?P<lo>[-+][\d.e+-]+), (?P<hi>[-+][\d.e+-]+)\]")
HEAD = re.compile(r"^(?:primary: |secondary: )?(?P<response>\S+) \(.*?(?:margin \+-(?P<margin>[\d.e+-]+)|no margin)")


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_no_sentence_of_a_committed_summary_contradicts_its_interval(folder):
    """Every verdict sentence of the committed summaries, read as text: its state agrees with
    the interval printed in it and the response's margin."""
    margin, seen = None, 0
    for line in (folder / "summary.txt").read_text().splitlines():
        head = HEAD.match(line)
        if head and not line.startswith("    "):
            margin = float(head["margin"]) if head["margin"] else None
            continue
        m = LINE.match(line)
        if not m:
            continue
        seen += 1
        lo, hi, state = float(m["lo"]), float(m["hi"]), m["state"]
        assert lo <= float(m["est"]) <= hi, line
        if state == "matters, beyond the margin":
            assert margin is not None and (lo > margin or hi < -margin), line
        elif state == "matters, size unsure":
            assert (lo > 0 or hi < 0) and (margin is None or not (lo > margin or hi < -margin)), line
        elif state == "negligible":
            assert margin is not None and -margin < lo and hi < margin, line
        elif "too few blocks to judge it" not in line:  # a look that tests nothing says why in words
            assert lo <= 0 <= hi, line
    assert seen >= (1 if "-confirm-" in folder.name else 20), seen  # a confirmation asks one question


ROW = re.compile(r"^    (?P<term>\S+(?: \S+)?)\s{2,}(?P<state>matters, beyond the margin|matters, size unsure|negligible|"
                 r"undecided)\s+(?P<est>[-+][\d.e+-]+) \[(?P<lo>[-+][\d.e+-]+), (?P<hi>[-+][\d.e+-]+)\]$")


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_terminal_answer_of_a_committed_study_fits_a_screen_and_agrees_with_itself(folder):
    """`analysis report`'s answer: at most about 40 lines of at most 120 characters; every row's
    state agrees with its interval and the response's margin; each sentence names a term in
    the state its row gives."""
    from analysis.sweep_reader import read_parquet
    from analysis.report import build_report

    sweep = read_parquet(folder / "runs.parquet")
    brief = build_report(sweep, None).brief
    lines = brief.splitlines()
    assert len(lines) <= 44 and max(map(len, lines)) <= 120, brief
    rows, margin, response, untested, section = {}, None, None, set(), {}
    for line in lines:
        head = re.match(r"^  (\S+) \(.*?(?:margin \+-([\d.e+-]+)|no margin declared)\)$", line)
        if head:
            response, margin = head[1], float(head[2]) if head[2] else None
            continue
        section[response] = section.get(response, "") + line + "\n"
        m = ROW.match(line)
        if not m:
            continue
        lo, hi, state = float(m["lo"]), float(m["hi"]), m["state"]
        rows[(response, m["term"])] = state
        assert lo <= float(m["est"]) <= hi, line
        if state == "matters, beyond the margin":
            assert lo > margin or hi < -margin, line
        elif state == "negligible":
            assert -margin < lo and hi < margin, line
        elif state == "undecided" and not lo <= 0 <= hi:
            untested.add(response)  # a look that tests nothing: its words must say why, below
    for r in untested:
        assert "too few blocks to judge any term" in section[r] or "for every response" in brief, (r, brief)
    family = len(sweep.record.responses) * max(len(sweep.record.primary_terms), 1)  # a confirmation: one question
    assert len(rows) >= (1 if "-confirm-" in folder.name else min(family, 9)), brief
    said = brief.split("\nin a sentence:\n", 1)[1]
    for r in {r for r, _ in rows}:
        text = " ".join(said.split(f"  {r}: ", 1)[1].split(".\n", 1)[0].split())
        for clause in text.split("; "):
            state = ("negligible" if " negligible" in clause else "undecided" if " undecided" in clause else
                     "matters, beyond the margin" if "beyond the margin" in clause else "matters, size unsure")
            for (rr, term), s in rows.items():
                if rr == r and re.search(rf"(?<![\w\[]){re.escape(term.split('[')[0])}(?![\w\]])", clause) and "[" not in term:
                    assert s == state, (r, term, clause)


def test_every_committed_study_names_its_cheapest_next_command():
    """`next_command` (the recap's last line, the HTML report's first screen, the parent
    run's note): the augment the planner prices where blocks within the plan decide a term,
    the planner where none do or the plan is spent, the report's detail where all is decided."""
    import math

    from analysis.rendering.words import next_command, next_step

    for folder in study_folders(ROOT / "results"):
        sweep = read_parquet(folder / "runs.parquet")
        rep = build_report(sweep, None, unrecorded="read from a parquet export")
        name = sweep.record.experiment
        cost, command = next_command(rep.decision, name, rep.look)
        step = next_step(rep.decision, name, rep.look)
        if command.startswith("trials augment "):
            assert command == f"trials augment {name} --replicates {int(cost)}" and command in step, (name, step)
        elif command.startswith("analysis plan "):
            assert math.isinf(cost) and step and f"analysis plan {name}" in step, (name, step)
        else:
            assert command.startswith(f"analysis report {name} --verbose") and not step, (name, step)


def visible_words(page: str) -> int:
    """The words a reader sees without opening a folded section (<details> but its <summary>),
    scripts and styles aside."""
    from html.parser import HTMLParser

    class Count(HTMLParser):
        def __init__(self):
            super().__init__()
            self.words, self.folded, self.summary, self.hidden = 0, 0, 0, 0

        def handle_starttag(self, tag, attrs):
            self.folded += tag == "details"
            self.summary += tag == "summary"
            self.hidden += tag in ("script", "style")

        def handle_endtag(self, tag):
            self.folded -= tag == "details"
            self.summary -= tag == "summary"
            self.hidden -= tag in ("script", "style")

        def handle_data(self, data):
            if not self.hidden and (not self.folded or self.summary):
                self.words += len(data.split())

    c = Count()
    c.feed(page)
    return c.words


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_a_committed_report_shows_the_answer_in_under_4000_words(folder):
    """Outside its folded sections a report is the answer and its tables: under 4,000 words
    (a secondary response's effects are folded)."""
    page = (folder / "report.html").read_text()
    assert visible_words(page) < 4000
    assert visible_words("<p>a b</p><details><summary>c d</summary><p>e f g</p></details>") == 4
