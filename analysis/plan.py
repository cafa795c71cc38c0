"""`analysis plan`: what an existing sweep's own numbers say about the next step.

Without `--effect`: per undecided term of each response, how many more replicate blocks
would decide it (`analysis.verdicts.blocks_to_decide`) and how many more prompts on the
existing checkpoints would (`analysis.variance`), each priced with the sweep's measured
times where the runs carry them, and the cheapest way to decide every primary term. With
`--effect`: the replicates needed to detect that effect, from the residual sigma the
experiment measured (`analysis.power`).
"""

from __future__ import annotations

import math

import pandas as pd

from . import power
from .anova import AnalysisError
from .attribution import analyse
from .design import factorial_rows
from .load import SweepRecord
from .diagnostics import choose_responses, sensitivity
from .sequential import look_alpha
from .variance import PROMPT_FACTORS, prompts_to_decide, split
from .verdicts import decide_all, margins_for


def check_arguments(effect: float | None, alpha: float, target_power: float) -> None:
    """Refuse, in one line, what no plan can answer."""
    if effect is not None and not (math.isfinite(effect) and effect != 0):
        raise AnalysisError(f"--effect: must be a finite non-zero number, got {effect!r}")
    if not 0 < alpha < 1:
        raise AnalysisError(f"--alpha: must lie in (0, 1), got {alpha!r}")
    if not 0 < target_power < 1:
        raise AnalysisError(f"--power: must lie in (0, 1), got {target_power!r}")


def plan_text(df: pd.DataFrame, effect: float | None, responses: list[str] | None = None,
              alpha: float | None = None, target_power: float = 0.8, margins: dict[str, float] | None = None) -> str:
    """`alpha` None: the report's (0.05, or the current look's under a sweep's sequential rule)."""
    factors = list(df.attrs.get("factors") or [])
    if factors and alpha is None and len(df):
        alpha, _ = look_alpha(df, factorial_rows(df, factors), None)
    alpha = 0.05 if alpha is None else alpha
    check_arguments(effect, alpha, target_power)
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    declared = margins_for(df, margins)
    if effect is None:
        return _decision_plan(df, factors, responses, alpha, declared)
    chosen, _ = choose_responses(df, responses, factors)
    data = factorial_rows(df, factors)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, block=block, adjust="none")
    lines = [f"{SweepRecord.of(df).experiment}: replicates needed to detect a main effect of {effect:g} "
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
    """Per undecided term, the two ways to decide it, each priced: more replicate blocks
    (retraining, with the measured time per trial) and more prompts on the existing
    checkpoints (`trials reeval`, with the measured decoding time per prompt, possible only
    where the runs carry prompt groups); then the cheapest way to decide every primary term."""
    chosen, _ = choose_responses(df, responses, factors, primary=list(declared))
    controls = sorted(c for c in df["cell"].unique() if str(c).startswith("control="))
    # the verdicts alone: a plan shows no fragility, so the leave-one-block-out refits are skipped
    d = decide_all(df, chosen, factors, declared, alpha, control=controls[0] if controls else None, fragility=False)
    minutes = median_minutes(df, "run_s")
    n_runs = len(df)
    per_block = next(iter(d.checks.values())).n_cells + len(controls)
    decode = median_minutes(df, "split/decode_s_per_prompt")
    cost = (f"blocks priced at {minutes:.3g} min per trial" if minutes else "no per-trial time in these runs: "
            "blocks are not priced") + (f", prompts at {60 * decode:.3g} s per prompt per run" if decode else "")
    lines = [f"{SweepRecord.of(df).experiment}: what would decide each undecided term ({d.method()}; {cost})"]
    more, blocks_all, prompt_multiples = _undecided_lines(d, df, factors)
    lines += more
    if blocks_all:
        price = f", about {blocks_all * per_block * minutes:.0f} worker-minutes" if minutes else ""
        lines.append(f"every primary term decided by blocks alone (each with 80% probability, if the effects are as "
                     f"estimated): {blocks_all} more replicate block(s) = {blocks_all * per_block} trials{price}")
    if prompt_multiples and None not in prompt_multiples:
        prompts_all = max(prompt_multiples)
        prompts = int(pd.to_numeric(df["split/prompts"]).median())
        # `trials reeval` decodes the whole new set of prompts in every run, not only the added ones
        price = f", about {prompts_all * prompts * n_runs * decode:.0f} worker-minutes of decoding" if decode else ""
        lines.append(f"every primary term decided by prompts alone: trials reeval NAME --spec-prompts "
                     f"{prompts_all * prompts}{price}")
    elif blocks_all:
        decoded = any(r.startswith(("spec/", "conf/", "sched/")) for r, c in d.checks.items() if c.primary)
        lines.append("no primary response comes from decoded prompts: only replicate blocks can decide these"
                     if not decoded else "more prompts alone cannot decide every primary term"
                     if "split/prompts" in df.columns else
                     "these runs carry no prompt groups: re-evaluate them (trials reeval) to price more prompts")
    return "\n".join(lines)


def _undecided_lines(d, df: pd.DataFrame, factors: list[str]) -> tuple[list[str], int, list]:
    """Per response, its undecided terms with what would decide each; the blocks that would
    decide every primary term and, per undecided primary term, the multiple of prompts
    (None where more prompts alone would not)."""
    lines, blocks_all, prompt_multiples = [], 0, []
    for r, check in d.checks.items():
        undecided = [v for v in d.of(r) if v.verdict == "undecided"]
        tag = "primary" if check.primary else "secondary"
        if not undecided:
            lines.append(f"  {r} ({tag}): every term is decided")
            continue
        sp = split(df, r, factors)
        lines.append(f"  {r} ({tag}): {len(undecided)} undecided" + (f"; {sp.text()}" if sp else
                                                                     "; no prompt groups: the evaluation's share "
                                                                     "of the noise is unknown"))
        for v in undecided:
            step = v.next_step or "unreplicated: run at least 2 replicate blocks first"
            k = prompts_to_decide(v, sp.var_eval.get(v.term, 0.0)) if sp else None
            if sp:
                step += (f"; or {k}x the prompts ({k * sp.prompts} per evaluation) on the existing checkpoints"
                         if k else f"; more prompts alone would not (up to {PROMPT_FACTORS[-1]}x)")
            lines.append(f"    {v.term}: {step}")
            if check.primary:
                blocks_all = max(blocks_all, v.blocks or 0)
                prompt_multiples.append(k)
    return lines, blocks_all, prompt_multiples


def median_minutes(df: pd.DataFrame, column: str) -> float | None:
    """The median of a column of seconds, in minutes, where the runs carry it: `run_s` (a
    trial's wall time) or `split/decode_s_per_prompt` (an evaluation's decoding per prompt)."""
    if column not in df.columns:
        return None
    s = pd.to_numeric(df[column], errors="coerce").dropna()
    return float(s.median()) / 60.0 if len(s) else None
