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
import shlex

import pandas as pd

from . import power
from .anova import AnalysisError
from .attribution import analyse
from trials.registry import Registry

from .coded_design import factorial_rows
from trials.export import SweepFrame
from .diagnostics import analysable, choose_responses, sensitivity
from .power import p_decided
from .text import wrap_text
from .boundary_table import boundary_lines
from .looks import LookResult, PlanPrices, look_for, look_shares, plan_prices
from .result_types import DECISION_POWER, UNDECIDED, UNSURE
from .item_kinds import evaluation_counts, more_items_command, seconds_column, what
from .sequential import EVALUATION_COLUMNS, TIMING
from .variance import PROMPT_FACTORS, prompts_to_decide, why_not_items
from .margins import margins_for
from .fits import response_models
from .verdicts import MAX_BLOCKS, blocks_to_decide, control_cells, decide_look


def check_arguments(effect: float | None, alpha: float, target_power: float) -> None:
    """Refuse, in one line, what no plan can answer."""
    if effect is not None and not (math.isfinite(effect) and effect != 0):
        raise AnalysisError(f"--effect: must be a finite non-zero number, got {effect!r}")
    if not 0 < alpha < 0.5:
        raise AnalysisError(f"--alpha: must lie in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got {alpha!r}")
    if not (isinstance(target_power, (int, float)) and math.isfinite(target_power) and 0 < target_power < 1):
        raise AnalysisError(f"--power: a probability in (0, 1), such as 0.8, got {target_power!r}")


def plan_text(sweep: SweepFrame, effect: float | None, responses: list[str] | None = None,
              alpha: float | None = None, target_power: float = 0.8, margins: dict[str, float] | None = None,
              every: bool = False) -> str:
    """`alpha` None: the report's (the current look's under the sweep's plan); `every`: every
    undecided term of every response, not only the primary terms."""
    return plan_with_look(sweep, effect, responses, alpha, target_power, margins, every=every)[0]


def plan_with_look(sweep: SweepFrame, effect: float | None, responses: list[str] | None = None,
                   alpha: float | None = None, target_power: float = 0.8, margins: dict[str, float] | None = None,
                   unrecorded: str = "", every: bool = False) -> tuple[str, LookResult | None]:
    """The plan's text and, without `--effect`, the look its verdicts are (None with it)."""
    df, factors, record = sweep.runs, list(sweep.factors), sweep.record
    check_arguments(effect, 0.05 if alpha is None else alpha, target_power)
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    declared = margins_for(record, margins, sweep.registry, df)
    if effect is None:
        return _decision_plan(sweep, responses, alpha, declared, bool(margins), unrecorded, every)
    alpha = 0.05 if alpha is None else alpha
    chosen, _ = choose_responses(df, responses, factors, experiment=record.experiment, rules=sweep.registry)
    data = factorial_rows(df, factors)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, block=block, adjust="none")
    lines = [f"{record.experiment}: replicates needed to detect a main effect of {effect:g} "
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
    return "\n".join(lines), None


def _decision_plan(sweep: SweepFrame, responses: list[str] | None, alpha: float | None,
                   declared: dict[str, dict], what_if: bool, unrecorded: str,
                   every: bool = False) -> tuple[str, LookResult]:
    """Per undecided primary term (`every`: every undecided term of every response), the two
    ways to decide it, each priced within what the sweep's sequential plan still allows:
    more replicate blocks (retraining, with the measured time per trial) and more evaluation
    items on the existing checkpoints (`trials reeval`, where the runs carry jackknife
    records), each at the alpha the plan would give that look; past the plan's maximum, a
    new, declared study and its size. The verdicts are the current look's."""
    df, factors, record, rules = sweep.runs, list(sweep.factors), sweep.record, sweep.registry
    every = every or bool(responses)  # responses named on the command line: every term of each
    chosen, skipped = choose_responses(df, responses, factors, primary=list(declared), experiment=record.experiment,
                                       rules=rules)
    chosen = analysable(factorial_rows(df, factors), chosen, factors, set(declared), skipped)  # as a report does
    models = response_models(df, chosen, factors, rules)
    look = look_for(sweep, look_shares(models, chosen, declared, rules), alpha, what_if)
    look.unrecorded = unrecorded
    prices = plan_prices(look, models, chosen, declared, rules)
    controls = control_cells(df)
    d = decide_look(sweep, chosen, declared, look, models, prices)
    look.record(d.verdicts)
    minutes = median_minutes(df, "run_s")
    per_block = next(iter(d.checks.values())).n_cells + len(controls)
    cost = (f"blocks at {minutes:.3g} min per trial" if minutes else "no per-trial time in these runs: "
            "blocks are not priced") + item_prices(df, rules)
    lines = [f"{record.experiment}: what would decide each undecided {'term' if every else 'primary term'}",
             f"  {look.label()}", f"  {_within(look, prices)}; {cost}",
             "  each term's se is seeds + items x runs + items x term (analysis.variance): blocks shrink the first "
             "two, items the last two"]
    lines += [f"  {line}" for line in boundary_lines(d, look)]
    more, blocks_all, item_multiples = _undecided_lines(d, rules, prices, every, record.experiment)
    lines += more
    if blocks_all:
        price = f", about {blocks_all * per_block * minutes:.0f} worker-minutes" if minutes else ""
        lines.append(f"every primary term decided by blocks alone (80% each, if the effects are as estimated): "
                     f"{blocks_all} more replicate block(s) = {blocks_all * per_block} trials{price}: "
                     f"trials augment {record.experiment} --replicates {blocks_all}")
    lines += _items_lines(d.noise, item_multiples, len(df), df, record.experiment, sweep.registry)
    lines += [f"not planned: {'; '.join(skipped)}"] if skipped and responses else []  # of those asked
    return "\n".join(fitted(lines)), look


def fitted(lines: list[str]) -> list[str]:
    """Each line within BRIEF_WIDTH columns, its continuation indented under it, commands whole."""
    out = []
    for line in lines:
        indent = line[:len(line) - len(line.lstrip())]
        out += wrap_text(line.strip(), indent + "  ", indent)
    return out


def _within(look: LookResult, prices: PlanPrices | None) -> str:
    """What the prices below are within: the plan's blocks and items left, or no plan."""
    if look.what_if:
        return "a what-if: priced at the alpha given, outside any plan"
    if prices is None:
        return ("no sequential plan declared: a next look would be post hoc (declare `sequential:` in the spec "
                "before the first look); priced at this look's alpha")
    items = f", up to {prices.items_left:.3g}x today's items" if prices.items_left else ""
    return f"within the plan: {prices.blocks_left} more block(s){items}, each look at the alpha the plan gives it"


def _items_lines(noise: dict, item_multiples: dict, n_runs: int, df: pd.DataFrame,
                 name: str = "NAME", rules: Registry | None = None) -> list[str]:
    """The re-evaluation that would decide every undecided primary term with a jackknife,
    where one would, priced where the runs say what an item costs (`seconds_column`). Terms
    of a response without one (timed, or older runs) are not priced in items: their own
    lines say so."""
    if not item_multiples:
        return []
    if None in item_multiples.values():
        return ["more evaluation items alone cannot decide every primary term within the plan"]
    out = []
    for kind in sorted({noise[r].kind for r, _ in item_multiples}):
        k = max(m for (r, _), m in item_multiples.items() if noise[r].kind == kind)
        items = max(noise[r].items for r, _ in item_multiples if noise[r].kind == kind)
        flag = more_items_command(kind, name, rules)
        # `trials reeval` evaluates the whole new set in every run, not only the added items
        each = median_minutes(df, seconds_column(kind, rules))
        price = (f", about {k * items * n_runs * each:.0f} worker-minutes of "
                 f"{'decoding' if kind == 'prompts' else 'evaluation'}" if each else "")
        how = f"trials {flag} {k * items}" if flag else f"{k * items} {what(kind)} (no row names what raises its count)"
        out.append(f"every primary term decided by items alone: {how}{price}")
    return out


def _undecided_lines(d, rules: Registry, prices: PlanPrices | None, every: bool,
                     name: str = "NAME") -> tuple[list[str], int, dict]:
    """Per response, its undecided terms with what would decide each; the blocks that would
    decide every primary term and, per undecided primary term, the multiple of evaluation
    items that would (None where more items alone would not)."""
    lines, blocks_all, item_multiples = [], 0, {}
    per_test = d.alpha_star
    alpha_items = (lambda k: prices.alpha_items(k, per_test)) if prices is not None else None
    most = prices.items_left if prices is not None else None
    for r, check in d.checks.items():
        if not (check.primary or every):
            continue
        undecided = [v for v in d.of(r) if v.verdict == UNDECIDED and (v.in_family or every)]
        tag = "primary" if check.primary else "secondary"
        if not undecided:
            unsure = sum(v.verdict == UNSURE for v in d.of(r) if v.in_family or every)
            lines.append(f"  {r} ({tag}): every {'term' if every else 'primary term'} is decided"
                         + (f" ({unsure} {'matters with its' if unsure == 1 else 'matter with their'} size unsure: "
                            "whether beyond the margin is open)"
                            if unsure else ""))
            continue
        sp = d.noise.get(r)
        lines.append(f"  {r} ({tag}): {len(undecided)} undecided" + (
            "" if sp else "; timed: more prompts do not reduce the seeds' noise (re-time it with trials time, or "
            "add blocks)" if rules.is_timed(r) else "; no jackknife records: the evaluation's part is unknown"))
        for v in undecided:
            step = v.next_step or _blocks_step(v, check, name)
            if v.blocks and check.replicates >= 2:  # the price, and the command that buys it
                step = step.replace(" trials) would decide it",
                                    f" trials: trials augment {name} --replicates {v.blocks}) would decide it", 1)
            k = prompts_to_decide(v, alpha_at=alpha_items, most=most) if sp else None
            if sp:
                words = what(sp.kind)
                cmd = more_items_command(sp.kind, name, rules)
                step += (f"; or {k}x the {words} ({k * sp.items}) on the existing checkpoints"
                         + (f": trials {cmd} {k * sp.items}" if cmd else "") if k else f"; {why_not_items(v, most)}")
            if v.in_family and v.blocks is None and prices is not None and not k and v.noise is not None:
                step += f"; {new_study(v, d.family, prices.alpha, what=what(sp.kind) if sp else None, name=name)}"
                # the cheaper route: that question alone, two arms
                step += f"; or that question alone: analysis plan {name} --confirm {shlex.quote(v.term)} --response {r}"
            lines.append(f"    {v.term}: {step}")
            if check.primary and v.in_family:
                blocks_all = None if v.blocks is None or blocks_all is None else max(blocks_all, v.blocks)
                if sp:
                    item_multiples[(r, v.term)] = k
    return lines, blocks_all or 0, item_multiples


def new_study(v, family: int, alpha: float, most: int = 400, what: str | None = None, name: str = "") -> str:
    """A new, declared study of the same cells that would decide the term on its own (80%,
    if the effect is as estimated) at `alpha` split over the same family, in one look: the
    fewest blocks with today's evaluation items; where blocks alone would not (an items x term
    part, which blocks never shrink), the fewest blocks with k times the items at the smallest
    such k among PROMPT_FACTORS, and the fewest blocks at any k where that is fewer. Each
    price names what buys it: `trials run` of a copy of the sweep's spec (`name`'s) under a
    new name with that many replicate blocks."""
    def blocks(k: float) -> int | None:
        for b in range(2, most + 1):
            se, df = v.noise.at(b, k)
            if p_decided(v.estimate, se, df, alpha / max(family, 1), v.margin) >= DECISION_POWER:
                return b
        return None

    head = "past the plan: a new study declared for it, "
    tail = f" at alpha {alpha:g} over the same family"

    def run(n: int, k: int = 1) -> str:
        more = f" and {k}x the {what}" if k > 1 else ""
        return f" (`trials run` a copy of sweeps/{name}.yaml under a new name with replicates: {n}{more})" if name else ""

    b = blocks(1.0)
    if b is not None:
        return f"{head}{b} blocks{tail}{run(b)}"
    found = {k: n for k in PROMPT_FACTORS if what and (n := blocks(float(k))) is not None}
    if not found:
        tried = f", even with {PROMPT_FACTORS[-1]}x the {what}" if what else ""
        return f"past the plan: a new study of up to {most} blocks would not decide it{tried}"
    k = min(found)
    fewest = min(found, key=lambda j: (found[j], j))
    more = f" (or {found[fewest]} blocks with {fewest}x)" if found[fewest] < found[k] else ""
    return f"{head}{found[k]} blocks with {k}x the {what}{more}{tail}{run(found[k], k)}"


def _blocks_step(v, check, name: str = "NAME") -> str:
    """What more replicate blocks would do for a term the verdicts did not price (one outside
    the family), or that the sweep is unreplicated."""
    if check.replicates < 2:
        return "unreplicated: run at least 2 replicate blocks first"
    k = blocks_to_decide(v, check.replicates, check.n_cells)
    return (f"{k} more block(s) ({k * check.n_cells} trials: trials augment {name} --replicates {k}) would decide it "
            f"({DECISION_POWER:.0%}, if the effect is as estimated)" if k
            else f"more than {MAX_BLOCKS} more replicate blocks would be needed")


def item_prices(df: pd.DataFrame, rules: Registry) -> str:
    """", <items> at X s per <item> per run" for each evaluation kind whose count's row
    declares what one of its items costs a run (`item_seconds`) where these runs hold it: the
    engine's kinds in their order, then the workload's own."""
    kinds = [k for k in EVALUATION_COLUMNS if k not in TIMING] + list(evaluation_counts(df.columns, rules))
    out = ""
    for kind in kinds:
        if each := median_minutes(df, seconds_column(kind, rules)):
            words = what(kind)
            # one item in the singular where dropping an s makes it ("prompts"), else "item" ("queries")
            plain = words.endswith("s") and not words.endswith(("ies", "ses", "xes", "zes", "ches", "shes"))
            one = words[:-1] if plain else "item"
            out += f", {words} at {60 * each:.3g} s per {one} per run"
    return out


def median_minutes(df: pd.DataFrame, column: str) -> float | None:
    """The median of a column of seconds, in minutes, where the runs carry it: `run_s` (a
    trial's wall time) or an item's (`item_kinds.seconds_column`); None where there is none."""
    if not column or column not in df.columns:
        return None
    s = pd.to_numeric(df[column], errors="coerce").dropna()
    return float(s.median()) / 60.0 if len(s) else None
