"""This analysis as a look of the sweep's sequential plan (`analysis.sequential`: the rule),
and what the plan still allows the next look: its blocks left and the level a look would
test at with more blocks or more items."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trials.export import SweepFrame

from .anova import AnalysisError
from .boundaries import MIN_STEP, nominal_levels
from .item_kinds import data_seen
from .look_record import Look, timed_digest
from .sequential import TIMING, Plan, information_fraction, information_fractions, plan_of


def retimed_since(last: Look, key: str, blocks: int, evaluation: dict) -> bool:
    """Whether data is the last look's runs timed again (with the same or other settings: the
    timing pass's rounds and prompts are part of the data, not of the plan's information)."""
    if last.data == key:
        return True
    untimed = lambda e: {k: v for k, v in e.items() if not k.startswith("timing")}  # noqa: E731
    return last.blocks == blocks and untimed(last.evaluation) == untimed(evaluation)


@dataclass
class LookResult:
    """What one analysis is, as a look: its alpha and the words saying so."""
    alpha: float
    look: Look | None
    index: int  # 1-based position among the plan's looks (0: not a look)
    new: bool
    plan: Plan | None
    what_if: bool = False
    unrecorded: str = ""  # why a new look is not recorded (a parquet export), "" where it is or is not new
    sealed: bool = False  # an old look's record gained the timed values' digest: to be written again
    given: bool = False  # the alpha was given (a what-if at a fixed level, outside the plan)
    retimed: bool = False  # the last look's runs, timed again since: its decisions stand, nothing is tested
    distrusted: list = field(default_factory=list)  # a line per earlier look whose decisions are not used (record_check)

    @property
    def family_alpha(self) -> float:
        """The alpha the family shares over the whole plan (the given one for a what-if)."""
        if self.given or self.plan is None:
            return self.alpha
        return self.plan.alpha

    def levels(self, response: str, per_test: float, df: float | None = None) -> tuple[float, float, int]:
        """(two-sided, one-sided nominal level, the look they come from) for a hypothesis of
        `response` with share `per_test` of the family's alpha, tested by a t statistic on `df`
        degrees of freedom (`Plan.levels`; None: a normal one)."""
        if self.given or self.plan is None or self.look is None:
            return per_test, per_test, self.index
        return self.plan.levels(self.index, response, per_test, df)

    def binding(self) -> dict[str, dict]:
        """What earlier looks decided (none for a what-if at a given alpha); for a re-timed
        look, its own decisions too."""
        if self.given or self.plan is None or not self.plan.planned:
            return {}
        return self.plan.binding(self.index + 1 if self.retimed else self.index)

    def frozen(self) -> str:
        """Why this analysis tests nothing that its look left open ("" where it tests): the
        runs were re-timed after the look, which adds no information on the plan's scale."""
        if not self.retimed:
            return ""
        return (f"not tested again: the runs were re-timed after look {self.index}, whose decisions stand; the new "
                "timings are used at the next look (more blocks), or see them as a what-if (--alpha A)")

    def record(self, verdicts) -> None:
        """The family's verdicts decided at this look, recorded on it (binding for every later
        look); only on a new look of a plan, never a what-if."""
        if not self.new or self.what_if or self.look is None or self.plan is None or not self.plan.planned:
            return
        earlier = self.binding()
        if self.plan.looks and self.look is self.plan.looks[0]:  # a margin is declared once: resolved here, kept
            self.look.margins = {v.response: float(v.margin) for v in verdicts if v.in_family and v.margin is not None}
        self.look.decided = {key: snap for v in verdicts
                             if v.in_family and (key := f"{v.response}|{v.term}") not in earlier
                             and (snap := v.snapshot()) is not None}

    def label(self) -> str:
        """One line for the report's first screen and the terminal summary."""
        if self.what_if:
            return (f"what-if: margins, responses, alpha or adjustment given; verdicts at alpha {self.alpha:.3g} "
                    "are not a look of the sweep and are not recorded")
        p, look = self.plan, self.look
        if p is None or look is None:
            return ""
        seen = look.describe()
        if not p.planned:
            if not look.post_hoc:
                return (f"fixed-sample analysis (no sequential plan declared) of {seen} at alpha {look.alpha:.3g}"
                    + (f" (not recorded: {self.unrecorded})" if self.new and self.unrecorded else ""))
            first = p.looks[0].describe()
            return (f"POST HOC look {self.index}: this sweep declared no sequential plan; its fixed-sample analysis "
                    f"saw {first}, this one {seen}; at alpha {look.alpha:.3g}, false verdicts across looks are not "
                    "kept at alpha")
        if self.retimed:
            return (f"look {self.index} of a plan of at most {p.max_replicates} blocks at {seen}, shown as recorded: the "
                    "runs were re-timed since, which adds no information on the plan's scale; its decisions stand, "
                    "the terms it left open wait for the next look (a what-if with the new timings: --alpha A)")
        head = (f"look {self.index} of a plan of at most {p.max_replicates} blocks at {seen}: information "
                f"{look.t:.0%}, {p.spent_alpha():.3g} of alpha {p.alpha:g} spent; boundaries for t statistics on their df, binding "
                "decisions")
        if look.post_hoc:
            head = f"POST HOC: {head}; the plan is {p.post_hoc or 'not declared before the first look'}"
        return head + (f" (not recorded: {self.unrecorded})" if self.new and self.unrecorded else "")


@dataclass(frozen=True)
class PlanPrices:
    """What a sweep's sequential plan still allows a next look: the blocks left before its
    maximum and the alpha a look would test at (spent(t_new) - spent(t_now), over the whole
    family) with b blocks and today's items (`alpha_at`), or today's blocks and k times the
    items (`alpha_items`, k at most `items_left`)."""
    alpha: float  # the plan's familywise alpha
    blocks_left: int
    alpha_at: Callable[[int, float], float]  # (blocks, a hypothesis' share of alpha) -> the next look's level
    alpha_items: Callable[[float, float], float]  # (k times today's items, share) -> likewise
    items_left: float | None  # the most multiple of today's items the plan allows (None: no cap declared)


def look_shares(models, responses: list[str], declared: dict, rules) -> dict[str, tuple[str, float]]:
    """The primary responses' evaluation shares for the information scale: (the evaluation
    kind a re-evaluation adds, the share of its residual variance). A timed response counts
    blocks alone: re-timing adds no information (`("", 0.0)`)."""
    out = {}
    for r in responses:
        if r not in declared:
            continue
        sp = None if rules.is_timed(r) else models.split(r)
        out[r] = (sp.kind, sp.share) if sp is not None else ("", 0.0)
    return out


def plan_prices(look: LookResult, models, responses: list[str], declared: dict, rules) -> PlanPrices | None:
    """The prices a next look has under the sweep's plan (None: no plan, or a what-if)."""
    plan, now = look.plan, look.look
    if plan is None or now is None or not plan.planned or look.what_if:
        return None
    shares = look_shares(models, responses, declared, rules)
    testing = [x for x in plan.looks[:look.index] if plan.tests_at(x.blocks)]
    chain = [x.t for i, x in enumerate(testing) if x.t >= max([y.t for y in testing[:i]], default=0.0) + MIN_STEP]

    def level(t: float, per_test: float, blocks: int) -> float:
        """The two-sided level a next look at fraction t and `blocks` blocks would test at (0:
        nothing new, or too few blocks for a term's own error)."""
        if not plan.tests_at(blocks) or t <= 0 or (chain and t < chain[-1] + MIN_STEP):
            return 0.0
        return nominal_levels(chain + [min(t, 1.0)], per_test, 2)[-1]

    def alpha_at(blocks: int, per_test: float) -> float:
        return level(information_fraction(plan, blocks, now.evaluation, shares), per_test, blocks)

    caps = [cap / n for kind, cap in plan.max_items.items() if (n := now.evaluation.get(kind))]
    items_left = min(caps) if caps else None

    def alpha_items(k: float, per_test: float) -> float:
        more = {key: v if key in TIMING else v * k for key, v in now.evaluation.items()}
        return level(information_fraction(plan, now.blocks, more, shares), per_test, now.blocks)

    return PlanPrices(plan.alpha, max(0, plan.max_replicates - now.blocks), alpha_at, alpha_items, items_left)


def look_for(sweep: SweepFrame, shares: dict[str, tuple[str, float]], alpha: float | None = None,
             what_if: bool = False) -> LookResult:
    """This analysis of the sweep's runs as a look of the plan its record holds (`shares`:
    see information_fraction). A given `alpha` or `what_if` (margins from the command line)
    makes it a what-if: computed as the look would be, tested at the given alpha, never
    recorded."""
    plan = plan_of(sweep.record.sequential)
    key, blocks, evaluation = data_seen(sweep.runs, sweep.registry)
    timed = timed_digest(sweep.runs, sweep.registry.timed())
    sealed = any(x.data == key and not x.timed for x in plan.looks) and bool(timed)
    last = plan.looks[-1] if plan.planned and plan.looks else None
    if (last is not None and not what_if and alpha is None and last.timed and timed and last.timed != timed
            and retimed_since(last, key, blocks, evaluation)):  # a timing pass again: shown as that look recorded it
        return LookResult(last.alpha, last, len(plan.looks), False, plan, retimed=True)
    try:
        look, new = plan.look(key, blocks, evaluation, information_fraction(plan, blocks, evaluation, shares),
                              timed, what_if=what_if or alpha is not None,
                              fractions=information_fractions(plan, blocks, evaluation, shares))
    except ValueError as e:
        raise AnalysisError(f"sequential plan: {e}") from None
    index = plan.looks.index(look) + 1
    if what_if or alpha is not None:
        return LookResult(look.alpha if alpha is None else alpha, look, index, new, plan, what_if=True,
                          given=alpha is not None)
    # a look recorded before looks kept the timed values' digest gains it: written again, not new
    return LookResult(look.alpha, look, index, new, plan, sealed=not new and sealed and look.timed == timed)
