"""The sweep's record as the engine keeps it and the statistics read it back: the checks of
its fields that hold wherever a record comes from (a spec, a parent run's tags, a parquet
export), so that each is checked in one place. A response's margin is checked here and
nowhere else (`margin_problem`): as a spec states it, a workload declares it, the CLI's
`--margin` gives it, and as a parent run's tag or an export's metadata holds it.
"""

from __future__ import annotations

import math


def relative_margin(margin) -> float | None:
    """The fraction a relative margin (`"10%"`: of the reference arm's mean, resolved by the
    analysis) stands for; None for anything else."""
    if not isinstance(margin, str) or not margin.strip().endswith("%"):
        return None
    try:
        pct = float(margin.strip()[:-1])
    except ValueError:
        return None
    return pct / 100 if math.isfinite(pct) and 0 < pct < 1000 else None


def margin_problem(margin) -> str | None:
    """Why a margin is unusable (None when it is a finite number > 0, or a percentage such as
    "10%": relative to the reference arm's mean, `analysis.margins.margins_for`)."""
    if margin is None:
        return "required: the smallest effect that would change a decision"
    if relative_margin(margin) is not None:
        return None
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
        return f"must be a finite number > 0 or a percentage of the reference mean such as '10%', got {margin!r}"
    return None


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
