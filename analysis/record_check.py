"""Recorded decisions checked against their runs before a report shows them.

A sweep's sequential record (`analysis.sequential.Plan`) is input like any other: a parent
run's tag or a parquet export's metadata that anyone can edit. Its plan is checked as it is
read (`analysis.sweep_reader.check_plan`: spent as its rule spends, the plan declared when the
sweep was made). Here each look that recorded binding decisions is checked against what it
claims:

- its runs: the replicate blocks it names must give the data fingerprint it recorded;
- its decisions: made again on those runs, with the looks before it as recorded (the way
  `analysis.results.replay` rebuilds them), they must be the recorded ones (verdict,
  estimate and interval).

A look whose fingerprint is that of another count of blocks than it names is read at that
count, in one line. A look that fails either check is named in one line, and its decisions
are not used: the report drops them (the terms are open again, tested at the later looks)
and says why on the look (`Look.note`), which the next recorded look keeps. A look whose runs were evaluated again
with more items, or timed again, since it was taken saw values that are no longer kept: its
decisions cannot be made again and stand as recorded.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from .anova import AnalysisError
from trials.export import SweepFrame
from .item_kinds import data_seen
from .look_record import Look, timed_digest
from .sequential import Plan, plan_of
from trials.registry import Registry

CHECKED = ("estimate", "ci_low", "ci_high")  # what a decision says beside its verdict


def checked(sweep: SweepFrame, build: Callable) -> tuple[SweepFrame, list[str]]:
    """(the sweep with what does not match its runs set right, one line for each change):
    a look whose data are another count of blocks than it records is read at the count its
    fingerprint gives; decisions that do not match their runs are dropped. `build(sub_sweep)`
    is a report without this check (`build_report`)."""
    plan = plan_of(sweep.record.sequential)
    if not plan.planned or not plan.looks:
        return sweep, []
    order = sorted(sweep.runs["replicate"].unique())
    lines = []
    for j, look in enumerate(plan.looks):
        kind, why = compare_data(look, _first(sweep, order, look.blocks), sweep.registry, len(order))
        if kind == "wrong" and (b := _blocks_of(sweep, order, look.data)) not in (None, look.blocks):
            lines.append(f"look {j + 1} records {look.blocks} replicate block(s), but its data fingerprint is that of "
                         f"the first {b}: read at {b}")
            look.blocks = b
            kind, why = compare_data(look, _first(sweep, order, b), sweep.registry, len(order))
        if kind == "wrong" and not look.decided:  # it decided nothing: its record is said to be wrong
            lines.append(f"look {j + 1} does not match its runs ({why}); it recorded no decision")
        if not look.decided or kind == "superseded":
            continue
        if kind == "same":
            try:
                why = differs(look.decided, decisions_at(sweep, plan, j, _first(sweep, order, look.blocks), build))
            except AnalysisError as e:  # its runs no longer make a report (they were edited since)
                why = f"it cannot be made again on its runs ({str(e).splitlines()[0][:160]})"
        if why:
            look.decided = {}
            look.note = f"not used: its recorded decisions do not match its runs ({why})"
            lines.append(f"look {j + 1}'s recorded decisions are not used: {why}")
    if not lines:
        return sweep, []
    record = dataclasses.replace(sweep.record, sequential=plan.to_json())
    return dataclasses.replace(sweep, record=record), lines


def _first(sweep: SweepFrame, order: list, blocks: int):
    """The runs of the sweep's first `blocks` replicate blocks."""
    return sweep.runs[sweep.runs["replicate"].isin(order[:blocks])]


def _blocks_of(sweep: SweepFrame, order: list, data: str) -> int | None:
    """How many first blocks give the data fingerprint `data` (None: no count does)."""
    return next((b for b in range(1, len(order) + 1) if data_seen(_first(sweep, order, b), sweep.registry)[0] == data),
                None)


def compare_data(look: Look, runs, rules: Registry, blocks_now: int) -> tuple[str, str]:
    """("same", "") where `runs` are the data `look` saw; ("superseded", why) where they are
    its runs evaluated again with more items or timed again since; ("wrong", why) otherwise."""
    if look.blocks > blocks_now:
        return "wrong", f"it names {look.blocks} replicate blocks, the sweep holds {blocks_now}"
    key, _, evaluation = data_seen(runs, rules)
    if key == look.data:
        if look.timed and timed_digest(runs, rules.timed()) != look.timed:
            return "superseded", "timed again since"
        return "same", ""
    then = {k: float(v) for k, v in look.evaluation.items() if isinstance(v, (int, float))}
    grew = [k for k, v in evaluation.items() if v > then.get(k, v)]
    if grew and all(evaluation.get(k, -math.inf) >= v for k, v in then.items()):
        return "superseded", f"evaluated again since ({', '.join(grew)})"
    return "wrong", (f"its first {look.blocks} block(s) give data {key}, not the {look.data or 'no'} fingerprint "
                     "it recorded")


def decisions_at(sweep: SweepFrame, plan: Plan, j: int, runs, build: Callable) -> dict[str, dict]:
    """What look `j` (0-based) decides when made again on `runs` with the looks before it as
    recorded."""
    before = dataclasses.replace(plan, looks=plan.looks[:j])
    record = dataclasses.replace(sweep.record, sequential=before.to_json())
    rep = build(dataclasses.replace(sweep, runs=runs, record=record))
    if rep.look is None or rep.look.look is None:
        return {}
    return dict(rep.look.look.decided)


def differs(recorded: dict[str, dict], made: dict[str, dict]) -> str:
    """The first hypothesis whose recorded decision is not the one made ("" where none)."""
    for key in sorted(set(recorded) | set(made)):
        a, b = recorded.get(key), made.get(key)
        if a is None:
            return f"its runs decide {key} ({_said(b)}), which it does not record"
        if b is None:
            return f"{key} recorded as {_said(a)}, which its runs do not decide"
        if a.get("verdict") != b.get("verdict") or not all(_same(a.get(k), b.get(k)) for k in CHECKED):
            return f"{key} recorded as {_said(a)}, its runs give {_said(b)}"
    return ""


def _same(a, b) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
    except (TypeError, ValueError):
        return False


def _said(rec: dict) -> str:
    try:
        return f"{rec.get('verdict')} {float(rec['estimate']):+.4g} [{float(rec['ci_low']):+.4g}, {float(rec['ci_high']):+.4g}]"
    except (KeyError, TypeError, ValueError):
        return str(rec.get("verdict") if isinstance(rec, dict) else rec)[:60]
