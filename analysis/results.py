"""`analysis results`: the committed study reports rebuilt from their committed runs.

Each folder under `results/` holds a study's `runs.parquet` (the runs as the analysis read
them, with the sweep's record: margins, family, plan and looks) and what the analysis made
of it: `report.html`, `report.md` and `summary.txt` (the terminal summary, then `analysis
plan`'s answer). Rebuilding them with today's renderer keeps them current; a test checks
that the committed verdict tables are what the renderer makes of the committed runs.
"""

from __future__ import annotations

from pathlib import Path

from trials.store.kept import write_atomic

from .anova import AnalysisError
from .load import read_parquet

RUNS = "runs.parquet"
SUMMARY = "summary.txt"


def study_folders(root: str | Path = "results") -> list[Path]:
    """Every study folder (one holding runs.parquet) under `root`, in name order."""
    return sorted(p.parent for p in Path(root).glob(f"*/{RUNS}"))


def rebuild(folder: str | Path) -> Path:
    """Rebuild one study's report.html, report.md and summary.txt from its runs.parquet, in
    place; returns the summary's path."""
    from .plan import plan_text
    from .report import build_report

    folder = Path(folder)
    if not (folder / RUNS).is_file():
        raise AnalysisError(f"results: {folder} holds no {RUNS}")
    sweep = read_parquet(folder / RUNS)
    rep = build_report(sweep, folder, unrecorded="read from a parquet export")
    text = rep.summary + "\n\n" + plan_text(sweep, None)
    write_atomic(folder / SUMMARY, text + "\n")
    return folder / SUMMARY
