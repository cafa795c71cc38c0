"""A sweep as the analysis holds it: `SweepFrame`, the table of its finished runs with what
a table cannot say itself (the factors, the sweep's record, the runs left out, the rows
`trials run --local` resumes from), and `SweepRecord`. Both are the engine's
(`trials.export`, where the sweep's record and its export live): the statistics read them.
`analysis.sweep_reader` builds a frame from the MLflow store or a parquet export; every function
that needs more than the table is handed the frame.
"""

from __future__ import annotations

import json

from trials.export import META_COLUMNS, SweepFrame, SweepRecord

__all__ = ["META_COLUMNS", "SweepFrame", "SweepRecord", "busy_timing", "timing_summary"]


def timing_summary(record: SweepRecord) -> dict:
    """The last timing pass's summary (its settings, response and busy count), {} for none."""
    try:
        last = json.loads(record.timing) if record.timing else {}
    except ValueError:
        return {}
    return last if isinstance(last, dict) else {}


def busy_timing(record: SweepRecord) -> tuple[str, int] | None:
    """(the timed response, how many of its run-rounds the last timing pass found busy), where
    it found any (`trials.timing.busy_rounds`); None for none, no pass, or a pass before the check."""
    last = timing_summary(record)
    busy = last.get("busy")
    if isinstance(busy, int) and not isinstance(busy, bool) and busy > 0 and isinstance(last.get("response"), str):
        return last["response"], busy
    return None
