"""The statistics' typed results, which travel between the statistics, the renderer and the
store writer: each contrast's verdict in one of the four states (`Verdict`, with `Contrast`,
`BlockTest`, `ResponseCheck`, `SimpleEffect`); the family's decision that holds them is
`analysis.decision.Decision`. The modules that compute them (variance, verdicts) import them
from here; a look's result is
`analysis.looks.LookResult`, a response's noise split `analysis.variance.Split`, each beside
what computes it, and what the renderers get, a response's ANOVA (`ResponseResult`) and the
whole attribution (`Report`), is `analysis.report_types`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .power import MAX_REPLICATES
from .sequential import MIN_DF  # MIN_DF: a term's error on fewer df says too little


DECISION_POWER = 0.8  # the planner's target: the probability that the next step decides a term


BEYOND, UNSURE, NEGLIGIBLE, UNDECIDED = ("matters, beyond the margin", "matters, size unsure", "negligible",
                                         "undecided")


VERDICTS = (BEYOND, UNSURE, NEGLIGIBLE, UNDECIDED)


SMALLER = "detected, smaller than the margin"  # a negligible effect whose (1 - alpha*) interval excludes zero


BLOCK_ALPHA = 0.05  # the block-by-term test names a term whose effect differs between blocks at this level
# How a term's block-by-term variation enters its error (`analysis.variance`; a sweep's plan
# may declare one, `sequential: {block_errors: ...}`): "own" (the default) judges every term
# against its own block-by-term mean square, exact whatever the interaction, at (B - 1) df a
# one-column term; "pooled" judges every term against the pooled residual, a declared choice
# whose verdicts carry a caveat (a seed that favours one arm makes them too narrow). No
# preliminary test chooses between them. bench/error_rates.py measures both.
BLOCK_ERRORS = ("own", "pooled")
WIDE = 10  # an interval wider than this many margins is shown with why and what would decide it


@dataclass(frozen=True)
class Contrast:
    term: str  # D1, D1:D9, D1[shifted->aligned], vs pure_ce
    label: str  # what the difference is, e.g. "shifted -> aligned"
    estimate: float
    se: float
    df: float
    group: str = ""  # the spec's name for it: D1 (also for D1[a->b]), D1:D9, pure_ce
    errors: str = ""  # the errors behind se and df where they are the contrast's own (a control's)
    L: np.ndarray | None = field(default=None, repr=False, compare=False)  # its row of the model (p,)
    noise: "TermNoise | None" = field(default=None, repr=False, compare=False)  # its own variance (a control's)


@dataclass(frozen=True)
class BlockTest:
    """The block-by-term interaction: F on (q, df) degrees of freedom and its p."""
    F: float
    q: int
    df: float
    p: float
    ms: float = float("nan")  # the block-by-term mean square (q df): the term's own error where it is used
    used: bool = False  # whether the term's error is that mean square (BLOCK_ERRORS' rule)

    def text(self) -> str:
        flag = "; the effect differs between blocks" if self.p < BLOCK_ALPHA else ""
        used = f"; judged against it ({self.q} df)" if self.used else ""
        return f"block x term F({self.q}, {self.df:g}) = {self.F:.2f}, p = {self.p:.2g}{flag}{used}"


@dataclass(frozen=True)
class TermNoise:
    """A contrast's variance by source (`analysis.variance`), each with its degrees of
    freedom: what its standard error is made of and what more blocks or items would buy."""
    seeds: float  # run to run (the seeds; the term's block-by-term variation where it is used)
    seeds_df: float
    item_run: float  # the evaluation's items x runs noise inside the runs' residual (0 without records)
    item_run_df: float
    item_term: float  # items x term: an item that favours one arm does so in every block (0 without records)
    item_term_df: float
    blocks: int  # the replicate blocks these were measured at
    source: str  # "pooled residual", "block x term", "HC2" (unbalanced) or the control's errors
    df: float  # Satterthwaite's df of the estimate of the total (analysis.variance)
    item_term_p: float = 1.0  # the items x term test's p (the part enters where it rejects at BLOCK_ALPHA)

    @property
    def total(self) -> float:
        return self.seeds + self.item_run + self.item_term

    @property
    def se(self) -> float:
        return math.sqrt(max(self.total, 0.0))

    def _projected(self, blocks: int, items: float) -> tuple[float, float]:
        grow = (blocks - 1) / max(self.blocks - 1, 1)
        parts = [((self.seeds + self.item_run / items) * self.blocks / blocks, self.seeds_df * grow),
                 (self.item_term / items, self.item_term_df)]
        total = sum(v for v, _ in parts)
        denom = sum(v * v / d for v, d in parts if v > 0 and d > 0)
        return total, (total * total / denom if denom > 0 else self.seeds_df * grow)

    def at(self, blocks: int, items: float) -> tuple[float, float]:
        """(se, df) with `blocks` replicate blocks and `items` times today's evaluation items:
        the seeds' part shrinks with blocks, the items x runs part with both, the items x term
        part with items alone. The df: Satterthwaite's over the run-level and items x term
        parts, the run-level df growing with the blocks, scaled so that today's size gives
        today's df."""
        total, df = self._projected(blocks, items)
        _, df_now = self._projected(self.blocks, 1.0)
        return math.sqrt(max(total, 0.0)), df * (self.df / df_now if df_now > 0 else 1.0)

    def shares(self) -> dict[str, float]:
        t = self.total or 1.0
        return {"seeds": self.seeds / t, "items x runs": self.item_run / t, "items x term": self.item_term / t}


@dataclass
class Verdict:
    response: str
    term: str
    label: str
    verdict: str  # one of VERDICTS
    estimate: float
    se: float
    df: float
    alpha_star: float
    ci_low: float  # the (1 - alpha*) interval: the test of "no effect"
    ci_high: float
    eq_low: float  # the (1 - 2 alpha*) interval: its bounds are the one-sided bounds at alpha*
    eq_high: float
    margin: float | None
    better: str
    p: float  # two-sided, unadjusted
    p_adj: float  # p times the family's size (capped at 1)
    p_equiv: float | None  # TOST: the larger one-sided p, unadjusted
    detectable: float  # the true effect the test rejects with 80% power at alpha*
    to_boundary: float  # the estimate's distance to the nearest decision boundary, in standard errors
    in_family: bool = True
    errors: str = "pooled"  # pooled | HC2 | POOLED_FALLBACK
    block: BlockTest | None = None
    noise: TermNoise | None = None  # what se is made of (None: a control's own errors)
    next_step: str = ""  # for an undecided term: what would decide it
    blocks: int | None = None  # replicate blocks to add that would decide it (80%), None if unknown
    alpha_eq: float | None = None  # the one-sided nominal level of 'negligible' and 'beyond' (None: alpha_star)
    decided_at: int | None = None  # the look that decided it (binding), where a plan's look did
    few: str = ""  # why its interval says little (too few blocks for its own error, or many margins wide)
    untested: bool = False  # too few blocks for its own error: this look tests nothing of it
    identical: bool = False  # its levels gave identical values in every block: the switch changed nothing

    @property
    def alpha_equiv(self) -> float:
        return self.alpha_star if self.alpha_eq is None else self.alpha_eq

    SNAPSHOT = ("verdict", "estimate", "se", "df", "alpha_star", "alpha_eq", "ci_low", "ci_high", "eq_low", "eq_high",
                "p", "p_equiv", "to_boundary")

    def snapshot(self) -> dict | None:
        """What a look records of a decided verdict (None: undecided, nothing to bind)."""
        if self.verdict == UNDECIDED:
            return None
        return {k: getattr(self, k) for k in self.SNAPSHOT}

    def bind(self, rec: dict) -> None:
        """Take an earlier look's decision (`snapshot`, with its "look"): binding."""
        for k in self.SNAPSHOT:
            if k in rec:
                setattr(self, k, rec[k])
        self.decided_at, self.next_step, self.blocks, self.few = int(rec["look"]), "", None, ""

    @property
    def matters(self) -> bool:
        return self.verdict in (BEYOND, UNSURE)

    @property
    def detected(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def smaller_than_margin(self) -> bool:
        """Negligible, and zero rejected by the two-sided test at alpha* (the (1 - alpha*)
        interval excludes it): "detected" is a rejection of zero at the family's alpha, never
        the (1 - 2 alpha*) interval's, which would test at 2 alpha*."""
        return self.verdict == NEGLIGIBLE and self.detected

    @property
    def asserts_effect(self) -> bool:
        """Whether the verdict's words assert a nonzero effect (matters, or detected and
        smaller than the margin): each is a rejection of zero at alpha*, the error a plan
        keeps at alpha (bench/error_rates.py counts every one)."""
        return self.matters or self.smaller_than_margin

    def direction(self) -> str:
        """'better' or 'worse' for a main effect or control contrast that matters (an
        interaction's sign says how effects combine, not which arm is better)."""
        if not self.matters or not self.better or not self.label:
            return ""
        good = (self.estimate > 0) == (self.better == "higher")
        return "better" if good else "worse"

    def interval(self) -> tuple[float, float, float]:
        """(low, high, level) of the interval the verdict rests on: the (1 - 2 alpha*) one,
        whose bounds are the one-sided tests at alpha*, for "beyond the margin" and
        "negligible"; the (1 - alpha*) one otherwise."""
        if self.verdict in (BEYOND, NEGLIGIBLE):
            return self.eq_low, self.eq_high, 1 - 2 * self.alpha_equiv
        return self.ci_low, self.ci_high, 1 - self.alpha_star

    def caveat(self) -> str:
        """What this verdict rests on that a reader must see beside it, in words ("" if nothing)."""
        return "; ".join(x for x in (self.differs(), self.few) if x)

    def differs(self) -> str:
        """Where its effect differs by block or by item (their tests shown, never used to choose)."""
        out = []
        if self.block is not None and self.block.used and self.block.p < BLOCK_ALPHA:
            out.append(f"by block (p {self.block.p:.2g})")
        if self.noise is not None and self.noise.item_term > 0 and self.noise.item_term_p < BLOCK_ALPHA:
            out.append(f"by item (p {self.noise.item_term_p:.2g})")
        return f"its effect differs {' and '.join(out)}: its own error holds that, {self.df:.0f} df" if out else ""

    def text(self) -> str:
        """One sentence that starts with `<term>: <verdict>` and agrees with its interval."""
        if self.identical:
            return (f"{self.term}: undecided: its levels changed nothing (estimate {self.estimate:+.3g}, se "
                    f"{self.se:.3g}: identical values in every block); {self.next_step}"
                    + ("" if self.in_family else " [outside the family]"))
        lo, hi, level = self.interval()
        what = f"{self.label}: " if self.label else ""
        est = f"{what}{self.estimate:+.4g} [{lo:+.4g}, {hi:+.4g}] at {pct(level)}"
        m = f"+-{self.margin:g}" if self.margin is not None else ""
        if self.verdict == BEYOND:
            way = self.direction()
            out = f"{self.term}: {BEYOND} ({est}, wholly beyond {m}{', ' + way if way else ''})"
        elif self.verdict == UNSURE:
            way = self.direction()
            reach = (f"; excludes zero, but its one-sided bounds [{self.eq_low:+.4g}, {self.eq_high:+.4g}] "
                     f"({pct(1 - 2 * self.alpha_equiv)}) reach inside {m}" if self.margin is not None
                     else "; no margin declared")
            out = f"{self.term}: {UNSURE} ({est}{reach}{', ' + way if way else ''})"
        elif self.verdict == NEGLIGIBLE:
            out = f"{self.term}: negligible within {m} ({est})"
            if self.smaller_than_margin:
                out += f"; {SMALLER} (zero outside [{self.ci_low:+.4g}, {self.ci_high:+.4g}] at {pct(1 - self.alpha_star)})"
        else:
            out = f"{self.term}: undecided ({est}"
            if self.margin is None:
                out += "; no margin declared, so negligible cannot be shown)"
            else:
                out += (f"; not shown within {m}: [{self.eq_low:+.4g}, {self.eq_high:+.4g}] at "
                        f"{pct(1 - 2 * self.alpha_equiv)})")
            if self.few:
                out += f"; {self.few}"
            elif math.isfinite(self.detectable):
                out += f"; this sweep detects {self.detectable:.3g} or more with {DECISION_POWER:.0%} power"
            if self.next_step:
                out += f"; {self.next_step}"
        if self.decided_at is not None:
            out += f"; decided at look {self.decided_at}"
        if self.verdict != UNDECIDED and self.few:
            out += f"; {self.few}"
        out += f"; {self.to_boundary:.1f} se from the nearest boundary"
        if self.errors != "pooled":
            out += f"; {self.errors} errors on {self.df:.3g} df"
        if self.block is not None:
            out += f"; {self.block.text()}"
        if not self.in_family:
            out += " [outside the family]"
        return out


@dataclass
class ResponseCheck:
    """What a response's verdicts rest on: the model's fit and errors, sigma with its own
    interval, and the replicates that sigma implies for a margin-sized effect."""
    response: str
    better: str
    margin: float | None
    primary: bool
    n: int
    df_resid: float
    sigma: float
    sigma_low: float  # 95% interval of sigma (chi-square on df_resid)
    sigma_high: float
    r2: float
    r2_adj: float
    errors: str  # "pooled" (balanced), "HC2" (unbalanced) or POOLED_FALLBACK
    n_cells: int
    replicates: int
    replicates_for_margin: tuple[int | None, int | None, int | None] | None = None  # at sigma low, point, high
    margin_of: str = ""  # a relative margin's words: "10% of the control's mean 16.3"

    @property
    def margin_text(self) -> str:
        """"+-0.01", or "+-1.63 (10% of the control's mean 16.3)" for a relative margin."""
        if self.margin is None:
            return "no margin declared"
        return f"+-{self.margin:.4g}" + (f" ({self.margin_of})" if self.margin_of else "")

    def text(self) -> str:
        parts = [f"{self.better} is better" if self.better else "no better direction",
                 f"margin {self.margin_text}" if self.margin is not None else "no margin declared",
                 f"sigma {self.sigma:.3g} [95% CI {self.sigma_low:.3g}, {self.sigma_high:.3g}] on {self.df_resid:g} df",
                 f"R2 {self.r2:.2f} (adj {self.r2_adj:.2f})",
                 "pooled errors (balanced design)" if self.errors == "pooled" else
                 "HC2 errors with Satterthwaite df (unbalanced design)" if self.errors == "HC2" else
                 f"{self.errors} errors (unbalanced design)"]
        if self.replicates_for_margin:
            lo, mid, hi = (reps(v) for v in self.replicates_for_margin)
            parts.append(f"replicates to detect +-{self.margin:g} with {DECISION_POWER:.0%} power at alpha*: {mid} "
                         f"({lo}-{hi} over sigma's CI)")
        return f"{self.response} ({'; '.join(parts)})"


@dataclass
class SimpleEffect:
    """A primary main effect at one combination of the other factors' levels."""
    response: str
    term: str
    at: str  # e.g. "D2=const4, D9=hidden"
    verdict: Verdict


def pct(level: float) -> str:
    s = f"{100 * level:.3f}".rstrip("0").rstrip(".")
    return f"{s}%"


def reps(v: int | None) -> str:
    return f">{MAX_REPLICATES}" if v is None else str(v)


