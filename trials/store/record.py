"""The sweep's record as the engine keeps it and the statistics read it back: the checks of
its fields that hold wherever a record comes from (a spec, a parent run's tags, a parquet
export), so that each is checked in one place.
"""

from __future__ import annotations

CONFIRMS_TEXT = ("study", "term", "response", "verdict")
CONFIRMS_NUMBERS = ("estimate", "low", "high")


def confirms_problem(given) -> str | None:
    """What is wrong with a `confirms:` record (a spec's, a parent's tag, an export's), or None."""
    form = ("confirms: {study: S, term: T, response: R, estimate: E, low: L, high: H, verdict: V}, the screening "
            "study's estimate it started from")
    if not isinstance(given, dict) or set(given) != set(CONFIRMS_TEXT + CONFIRMS_NUMBERS):
        return f"{form}, got {str(given)[:80]!r}"
    bad = [k for k in CONFIRMS_TEXT if not isinstance(given[k], str) or not given[k]]
    bad += [k for k in CONFIRMS_NUMBERS
            if isinstance(given[k], bool) or not isinstance(given[k], (int, float)) or given[k] != given[k]]
    return f"confirms.{bad[0]}: {'text' if bad[0] in CONFIRMS_TEXT else 'a number'}, got {given[bad[0]]!r}" if bad else None
