"""`analysis results`: the committed study reports rebuilt from their committed runs.

Each folder under `results/` holds a study's `runs.parquet` (the runs as the analysis read
them, with the sweep's record: margins, family, plan and looks) and what the analysis made
of it: `report.html`, `report.md` and `summary.txt` (the terminal summary, then `analysis
plan`'s answer). Rebuilding them with today's renderer keeps them current; a test checks
that the committed verdict tables are what the renderer makes of the committed runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trials.store.kept import write_atomic

from .anova import AnalysisError
from .sweep_reader import read_parquet
from trials.export import to_parquet
from .record_check import decisions_at
from .item_kinds import data_seen
from .look_record import timed_digest
from .sequential import plan_of
from trials.registry import Registry

RUNS = "runs.parquet"
SUMMARY = "summary.txt"


def study_folders(root: str | Path = "results") -> list[Path]:
    """Every study folder (one holding runs.parquet) under `root`, in name order."""
    return sorted(p.parent for p in Path(root).glob(f"*/{RUNS}"))


def rebuild(folder: str | Path) -> Path:
    """Rebuild one study's report.html, report.md and summary.txt from its runs.parquet, in
    place; returns the summary's path."""
    from . import links  # reads its neighbours' reports: build_report, matplotlib
    from .plan import plan_text
    from .report import build_report

    folder = Path(folder)
    if not (folder / RUNS).is_file():
        raise AnalysisError(f"results: {folder} holds no {RUNS}")
    sweep = read_parquet(folder / RUNS)
    replayed = replay(sweep, force=True)
    if replayed.record.sequential != sweep.record.sequential:
        sweep = replayed
        to_parquet(sweep, folder / RUNS)  # the binding decisions kept with the runs
    found = links.in_folders(folder, sweep.record.experiment)
    rep = build_report(sweep, folder, unrecorded="read from a parquet export", links=links.confirmation_lines(found),
                       check=False)  # its decisions were just made again on their runs
    text = rep.summary + "\n\n" + plan_text(sweep, None)
    write_atomic(folder / SUMMARY, text + "\n")
    return folder / SUMMARY


def replay(sweep, force: bool = False):
    """The sweep with its recorded looks' binding decisions made under today's rules on the
    data each look had, for a study recorded before looks kept them (or, `force`, to re-read
    a committed study under corrected statistics): each earlier look is analysed on the runs
    of its blocks and what it decides is recorded on it, so that the last look shows which
    decisions were made at which look. A look is replayed only where those runs are the data
    it saw: its fingerprint (runs and their evaluation) and its timed values' digest must be
    the runs' now. One whose blocks were re-evaluated later (more prompts) or re-timed (a
    timing pass again) saw other values: it is marked "not replayed" and decides nothing,
    which can only lower the error spent (its alpha is spent, unused). Unchanged where every
    look before the last records its decisions already (unless `force`), or there is no plan."""
    from .report import build_report

    plan = plan_of(sweep.record.sequential)
    if not plan.planned or len(plan.looks) < 2 or (not force and any(x.decided for x in plan.looks)):
        return sweep
    order = sorted(sweep.runs["replicate"].unique())
    margins = {}
    build = lambda sub: _kept(build_report(sub, None, check=False), margins)  # noqa: E731
    for j, look in enumerate(plan.looks if force else plan.looks[:-1]):
        look.decided, look.note = {}, ""
        if j == 0:
            look.margins = {}
        runs = sweep.runs[sweep.runs["replicate"].isin(order[:look.blocks])]
        if (why := _not_replayed(look, runs, sweep.registry)):
            look.note = f"not replayed: {why}"
            continue
        try:
            look.decided = decisions_at(sweep, plan, j, runs, build)
        except AnalysisError as e:
            look.note = f"not replayed: {str(e)[:200]}"
            continue
        if j == 0:
            look.margins = dict(margins)
    return dataclasses.replace(sweep, record=dataclasses.replace(sweep.record, sequential=plan.to_json()))


def _kept(rep, margins: dict):
    """The report, its first look's resolved margins kept in `margins`."""
    margins.clear()
    if rep.look is not None and rep.look.look is not None:
        margins.update(rep.look.look.margins)
    return rep


def _not_replayed(look, runs, rules: Registry) -> str:
    """Why these runs are not the data `look` saw ("" where they are)."""
    if not look.data:
        return "recorded without its data's fingerprint"
    key, _, evaluation = data_seen(runs, rules)
    if key != look.data:
        what = ", ".join(f"{k.replace('_', ' ')} {look.evaluation.get(k, 0):g} then, {v:g} now"
                         for k, v in evaluation.items() if look.evaluation.get(k) != v)
        return f"its runs were evaluated again after it ({what or 'other runs'})"
    if look.timed and timed_digest(runs, rules.timed()) != look.timed:
        return "its runs were timed again after it (a later timing pass): the values it saw are not kept"
    return ""
