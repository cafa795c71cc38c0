"""The primary responses' margins and better directions: the sweep record's, overridden by
the CLI's `--margin RESPONSE=VALUE`, a relative margin ("10%") resolved on the runs (or as
the plan's first look resolved it)."""

from __future__ import annotations

import math

import pandas as pd

from trials.registry import UNKNOWN, Registry
from trials.store.record import margin_problem, relative_margin
from trials.sweep_record import SweepRecord

from .anova import AnalysisError
from .sequential import plan_of


def margins_for(record: SweepRecord, given: dict[str, float | str] | None = None,
                rules: Registry | None = None, runs: pd.DataFrame | None = None) -> dict[str, dict]:
    """The primary responses: the spec's (the sweep record's `responses`), with `given`
    (`--margin RESPONSE=VALUE`) supplying or overriding margins. Better directions are the
    registry's (the swept workload's, as the record names it). A relative margin ("10%") is
    resolved on `runs`: that share of the reference arm's mean (the control's where the sweep
    has one, else every factorial run's), said in `of` beside the number."""
    rules = rules or UNKNOWN
    out = {}
    kept = first_look_margins(record)
    for name, decl in dict(record.responses).items():
        if relative_margin(decl["margin"]) is not None and name in kept:  # resolved once, at the first look
            out[name] = {"better": decl.get("better") or rules.better(name), "margin": kept[name],
                         "of": f"{decl['margin']}, resolved at the plan's first look"}
            continue
        out[name] = {"better": decl.get("better") or rules.better(name),
                     **resolved_margin(name, decl["margin"], runs)}
    for name, margin in (given or {}).items():
        if problem := margin_problem(margin):
            raise AnalysisError(f"--margin {name}: {problem}")
        out[name] = {"better": rules.better(name), **resolved_margin(name, margin, runs)}
    return out


def first_look_margins(record: SweepRecord) -> dict[str, float]:
    """The margins as the plan's first look resolved them ({} where none is recorded)."""
    try:
        plan = plan_of(record.sequential)
    except ValueError:
        return {}
    return dict(plan.looks[0].margins) if plan.planned and plan.looks else {}


def resolved_margin(name: str, margin, runs: pd.DataFrame | None) -> dict:
    """{"margin": a number} for an absolute margin; for a relative one, the number it comes
    to on these runs and `of`, the words that say how."""
    frac = relative_margin(margin)
    if frac is None:
        return {"margin": float(margin)}
    if runs is None or name not in runs.columns:
        raise AnalysisError(f"{name}: the relative margin {margin} needs the runs' {name} to resolve it")
    values = pd.to_numeric(runs[name], errors="coerce")
    arm = runs["arm"].astype(str) if "arm" in runs.columns else pd.Series("factorial", index=runs.index)
    control = values[arm.str.startswith("control") & values.notna()]
    ref, which = (control, "the control's") if len(control) else (values[arm == "factorial"].dropna(), "the runs'")
    mean = float(ref.mean()) if len(ref) else math.nan
    if not (math.isfinite(mean) and mean != 0):
        raise AnalysisError(f"{name}: the relative margin {margin} needs a finite, non-zero mean of {which} "
                            f"{name}, got {mean!r}")
    return {"margin": frac * abs(mean), "of": f"{margin} of {which} mean {mean:.4g}"}


def parse_margins(items: list[str] | None) -> dict[str, float | str]:
    """`RESPONSE=VALUE` strings (the CLI's repeatable --margin; VALUE a number or a share of
    the reference mean such as 10%) to a mapping; one line on error."""
    out = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        try:
            margin = value.strip() if relative_margin(value) is not None else float(value)
        except ValueError:
            margin = value
        if not sep or not name or margin_problem(margin):
            raise AnalysisError(f"--margin: expected RESPONSE=VALUE with VALUE a finite number > 0 or a share of the "
                                f"reference mean such as 10%, got {item!r}")
        out[name] = margin
    return out
