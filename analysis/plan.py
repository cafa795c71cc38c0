"""`analysis plan`: what an existing sweep's own numbers say about the next step.

Without `--effect`: per undecided term of each response, how many more replicate blocks
would decide it (`analysis.verdicts.blocks_to_decide`), priced with the sweep's measured
time per trial where the runs carry it. With `--effect`: the replicates needed to detect
that effect, from the residual sigma the experiment measured (`analysis.power`).
"""

from __future__ import annotations

import math

import pandas as pd

from . import power
from .anova import AnalysisError
from .attribution import analyse
from .design import factorial_rows
from .report import choose_responses, sensitivity
from .verdicts import decide_all, margins_for


def check_arguments(effect: float | None, alpha: float, target_power: float) -> None:
    """Refuse, in one line, what no plan can answer."""
    if effect is not None and not (math.isfinite(effect) and effect != 0):
        raise AnalysisError(f"--effect: must be a finite non-zero number, got {effect!r}")
    if not 0 < alpha < 1:
        raise AnalysisError(f"--alpha: must lie in (0, 1), got {alpha!r}")
    if not 0 < target_power < 1:
        raise AnalysisError(f"--power: must lie in (0, 1), got {target_power!r}")


def plan_text(df: pd.DataFrame, effect: float | None, responses: list[str] | None = None, alpha: float = 0.05,
              target_power: float = 0.8, margins: dict[str, float] | None = None) -> str:
    check_arguments(effect, alpha, target_power)
    factors = list(df.attrs.get("factors") or [])
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    declared = margins_for(df, margins)
    if effect is None:
        return _decision_plan(df, factors, responses, alpha, declared)
    chosen, _ = choose_responses(df, responses, factors)
    data = factorial_rows(df, factors)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, block=block, adjust="none")
    lines = [f"{df.attrs.get('experiment', '')}: replicates needed to detect a main effect of {effect:g} "
             f"(high minus low, two-level factor) with {target_power:.0%} power at alpha {alpha}"]
    for r, res in results.items():
        s = sensitivity(data, res, factors, alpha)
        if s is None:
            lines.append(f"  {r}: no residual sigma (unreplicated sweep); run at least 2 replicates first")
            continue
        now = power.power(effect, s.sigma, s.n_cells, s.replicates, alpha)
        head = (f"  {r}: sigma {s.sigma:.4g} over {s.n_cells} cells; this sweep ({s.replicates} replicates) "
                f"had power {now:.2f}; ")
        try:
            need = power.replicates_needed(effect, s.sigma, s.n_cells, alpha, target_power)
        except ValueError:
            lines.append(head + f"needed: more than {power.MAX_REPLICATES} replicates")
            continue
        lines.append(head + f"needed: {need} replicates ({need * s.n_cells} runs)")
    return "\n".join(lines)


def _decision_plan(df: pd.DataFrame, factors: list[str], responses: list[str] | None, alpha: float,
                   declared: dict[str, dict]) -> str:
    chosen, _ = choose_responses(df, responses, factors, primary=list(declared))
    controls = sorted(c for c in df["cell"].unique() if str(c).startswith("control="))
    d = decide_all(df, chosen, factors, declared, alpha, control=controls[0] if controls else None)
    minutes = trial_minutes(df)
    cost = (f"{minutes:.3g} min of one worker per trial, measured" if minutes else
            "no per-trial time in these runs, so blocks are not priced")
    lines = [f"{df.attrs.get('experiment', '')}: what would decide each undecided term ({d.method()}; {cost})"]
    worst = 0
    for r, check in d.checks.items():
        undecided = [v for v in d.of(r) if v.verdict == "undecided"]
        tag = "primary" if check.primary else "secondary"
        if not undecided:
            lines.append(f"  {r} ({tag}): every term is decided")
            continue
        lines.append(f"  {r} ({tag}): {len(undecided)} undecided")
        for v in undecided:
            lines.append(f"    {v.term}: {v.next_step or 'unreplicated: run at least 2 replicate blocks first'}")
        if check.primary:
            worst = max([worst, *(v.blocks or 0 for v in undecided)])
    if worst:
        n_cells = next(iter(d.checks.values())).n_cells + len(controls)
        price = f", about {worst * n_cells * minutes:.0f} worker-minutes" if minutes else ""
        lines.append(f"every primary term decided (each with 80% probability, if the effects are as estimated): "
                     f"{worst} more replicate block(s) = {worst * n_cells} trials{price}")
        lines.append("more prompts per evaluation are not priced yet: per-prompt results are not recorded")
    return "\n".join(lines)


def trial_minutes(df: pd.DataFrame) -> float | None:
    """The median wall time of one trial in minutes, where the runs carry it (`run_s`)."""
    if "run_s" not in df.columns:
        return None
    s = pd.to_numeric(df["run_s"], errors="coerce").dropna()
    return float(s.median()) / 60.0 if len(s) else None
