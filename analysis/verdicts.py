"""Verdicts: every term of every response ends in one of four states.

One alpha decides everything. The family is primary responses x primary terms (the spec's
`primary_terms`, by default every main effect and control); each of its m contrasts is
tested at alpha* = alpha / m (Bonferroni; `adjust="none"` gives alpha* = alpha). Other terms
and responses are decided at the same alpha*, outside the family (they do not count in m).
Bonferroni and not Holm: a step-down rule can reject a hypothesis whose own interval at its
printed level still holds zero, and no sentence may contradict the interval printed beside
it. For an estimate e with standard error se and df degrees of freedom, t1 = t_{1-alpha*/2}
and t2 = t_{1-alpha*}:

- matters, beyond the margin: zero is rejected (the (1 - alpha*) interval e +- t1 se excludes
  it) and the one-sided bound at alpha* lies beyond +-margin (e - t2 se > margin, or
  e + t2 se < -margin): the (1 - 2 alpha*) interval lies wholly beyond the margin;
- matters, size unsure: zero is rejected, but the one-sided bound reaches inside the margin
  (with no margin declared, every effect that matters is of unsure size);
- negligible: both one-sided tests against -margin and +margin reject at alpha* (TOST): the
  (1 - 2 alpha*) interval lies inside (-margin, +margin). Where zero is also rejected (the
  (1 - alpha*) interval excludes it: the same two-sided test at alpha* as "matters") the
  effect is "detected, smaller than the margin"; never on the (1 - 2 alpha*) interval, which
  would reject zero at 2 alpha*;
- undecided: none of these.

Contrasts come from one OLS per response: the terms the design can estimate (sum coding,
`analysis.anova`), the replicate as an additive block. A two-level term's contrast is the
DOE effect (mean where its coded product is +1 minus mean where it is -1, over cell means).
A factor of more than two levels enters as every pair of its levels (`D1[a->b]`). A control
arm adds one contrast, every factorial arm pooled against it, from the cell-means model of
all arms with the block.

Errors match the design. In a balanced design (every cell in every block, equally often)
the pooled OLS errors are unbiased for the factorial contrasts even where cell variances
differ, since every cell enters each contrast with the same weight. Where the design is
unbalanced (missing runs, or a control arm of a different size), the errors are HC2 with the
Satterthwaite degrees of freedom of Bell & McCaffrey (2002): the df of the scaled
chi-square that matches the HC2 variance's first two moments under homoskedastic errors.

Beside each family term the block-by-term interaction is tested (an F test of the term's
columns times the block's; studentised: the term's effect measured within each block
against the pooled error): a term whose effect differs between blocks is named. Every
verdict says how far its estimate lies from the nearest decision boundary, in standard
errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import special, stats

from trials.export import SweepFrame
from trials.registry import UNKNOWN, Registry

from . import power, variance
from .anova import AnalysisError
from .coded_design import with_value
from .control_noise import control_noise
from .fits import DecideSettings, Models, default_terms, response_models
from .model import Fit, control_contrast, named_contrast, own_error_terms, simple_effects, term_contrasts
from .power import p_decided
from .decision import Decision
from .result_types import (BEYOND, DECISION_POWER, MIN_DF, NEGLIGIBLE, UNDECIDED, UNSURE, Contrast, SimpleEffect, Verdict)
from .looks import LookResult, PlanPrices
from .verdict_notes import IDENTICAL, mark_identical, noise_and_caveats, response_check, response_scale, say_few

ADJUSTMENTS = ("bonferroni", "none")
MAX_BLOCKS = 1000
COUNT_METRICS = {BEYOND: "verdicts/matters_beyond", UNSURE: "verdicts/matters_unsure", NEGLIGIBLE: "verdicts/negligible",
                 UNDECIDED: "verdicts/undecided"}  # the parent run's counts of the family's verdicts


# ---------------------------------------------------------------- deciding

def classify(estimate, se, df, alpha_star: float, margin: float | None, alpha_eq: float | None = None) -> np.ndarray:
    """The verdicts of estimates (arrays broadcast) at alpha* (two-sided, "no effect") and
    alpha_eq (one-sided, "negligible" and "beyond"; alpha* where None): the rule of the module
    docstring, vectorised, so that a simulation runs the same code as a report."""
    estimate, se, df = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (estimate, se, df)))
    t1 = special.stdtrit(df, 1 - alpha_star / 2) * se
    t2 = special.stdtrit(df, 1 - (alpha_star if alpha_eq is None else alpha_eq)) * se
    matters = (estimate - t1 > 0) | (estimate + t1 < 0)
    if margin is None:
        negligible = beyond = np.zeros(estimate.shape, bool)
    else:
        negligible = (estimate - t2 > -margin) & (estimate + t2 < margin)
        beyond = matters & ((estimate - t2 > margin) | (estimate + t2 < -margin))
    return np.where(negligible, NEGLIGIBLE, np.where(beyond, BEYOND, np.where(matters, UNSURE, UNDECIDED)))


def distance_to_boundary(estimate: float, se: float, df: float, alpha_star: float, margin: float | None,
                         alpha_eq: float | None = None) -> float:
    """How far, in standard errors, the estimate lies from the nearest point where its
    verdict would change."""
    t1 = float(special.stdtrit(df, 1 - alpha_star / 2))
    t2 = float(special.stdtrit(df, 1 - (alpha_star if alpha_eq is None else alpha_eq)))
    edges = [t1 * se, -t1 * se]
    if margin is not None:
        edges += [margin + t2 * se, -margin - t2 * se]
        if margin - t2 * se > 0:
            edges += [margin - t2 * se, -margin + t2 * se]
    return float(min(abs(estimate - e) for e in edges) / se)


def decide(c: Contrast, response: str, alpha_star: float, margin: float | None, better: str,
           family: int, in_family: bool = True, alpha_eq: float | None = None) -> Verdict:
    """The verdict of one contrast at alpha* (two-sided) and alpha_eq (one-sided; alpha*
    where None; see the module docstring), on the errors its `errors` names (pooled where
    it names none)."""
    if not (np.isfinite(c.se) and c.se > 0 and c.df >= 1):
        raise AnalysisError(f"{response} {c.term}: no standard error (too few runs)")
    a_eq = alpha_star if alpha_eq is None else alpha_eq
    t1 = stats.t.ppf(1 - alpha_star / 2, c.df)
    t2 = stats.t.ppf(1 - a_eq, c.df)
    p = float(2 * stats.t.sf(abs(c.estimate / c.se), c.df))
    p_equiv = None
    if margin is not None:
        p_equiv = float(max(stats.t.sf((c.estimate + margin) / c.se, c.df),
                            stats.t.cdf((c.estimate - margin) / c.se, c.df)))
    verdict = str(classify(c.estimate, c.se, c.df, alpha_star, margin, a_eq))
    return Verdict(response, c.term, c.label, verdict, c.estimate, c.se, c.df, alpha_star,
                   c.estimate - t1 * c.se, c.estimate + t1 * c.se, c.estimate - t2 * c.se, c.estimate + t2 * c.se,
                   margin, better, p, min(1.0, p * family), p_equiv,
                   power.t_detectable(c.se, c.df, alpha_star, DECISION_POWER),
                   distance_to_boundary(c.estimate, c.se, c.df, alpha_star, margin, a_eq), in_family, c.errors or "pooled",
                   alpha_eq=alpha_eq)


def blocks_to_decide(v: Verdict, replicates: int, n_cells: int, target: float = DECISION_POWER,
                     alpha_at: Callable[[int], float] | None = None, most: int = MAX_BLOCKS) -> int | None:
    """The fewest replicate blocks to add (at most `most`) so that the term is decided with
    probability `target` if its true effect equals today's estimate: its variance model says
    what more blocks buy (`TermNoise.at`: the items x term part stays); without one, se
    shrinks as 1/sqrt(blocks) and each block adds n_cells - 1 residual df. `alpha_at(blocks)`:
    the alpha* a look at that many blocks would test at (a plan's; today's where None)."""
    k = 1
    while k <= most:
        r = replicates + k
        a = v.alpha_star if alpha_at is None else alpha_at(r)
        if v.noise is not None:
            se, df = v.noise.at(r, 1.0)
        else:
            se, df = v.se * math.sqrt(replicates / r), v.df + k * (n_cells - 1)
        if 0 < a < 1 and se > 0 and p_decided(v.estimate, se, df, a, v.margin) >= target:
            return k
        k = k + 1 if k < 16 else int(k * 1.25)
    return None


@dataclass(frozen=True)
class _Test:
    """What one response's contrasts are tested with: its declaration (margin, better), the
    family's size, this look's levels (`at`: two-sided, one-sided alpha*, the look) and their
    df calibration (`at_df`), and the response's scale (what counts as identical)."""
    response: str
    margin: float | None
    better: str
    family: int
    at: tuple[float, float, int]
    at_df: Callable[[float], tuple[float, float]] | None
    scale: float


def decide_all(df: pd.DataFrame, responses: list[str], factors: list[str], margins: dict[str, dict],
               alpha: float = 0.05, how: DecideSettings | None = None, **given) -> Decision:
    """Verdicts for every contrast of every response. The family: the primary responses (with
    a margin, or all where none has) x the primary terms; `alpha` is the family's over the
    whole plan, each hypothesis' share alpha* = alpha / m. `how`: the settings
    (`DecideSettings`), any of whose fields may also be given by name."""
    how = replace(how or DecideSettings(), **given)
    rules, _ = how.rules or UNKNOWN, _check_settings(how.adjust, alpha)
    ms = how.models or response_models(df, responses, factors, rules)
    data, block, rows, fits = ms.data, ms.block, ms.rows, ms.fits
    found = {r: _every_contrast(fits[r], rows[r], with_value(df, r), r, factors, how) for r in responses}
    terms, primary, family = _family(found, responses, margins, how.primary_terms
                                     or default_terms(factors, how.control, how.contrasts))
    per_test = alpha / family if how.adjust == "bonferroni" else alpha
    n_cells, reps = data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups, _blocks(data, block)
    checks, verdicts, tests = {}, [], {}
    for r in responses:
        test = tests[r] = _test_of(r, margins, rules, family, per_test, how.levels, response_scale(rows[r][r]))
        if how.block_tests:
            variance.add_tests(ms.models[r], own_error_terms(fits[r], found[r], r in primary, terms, factors),
                               how.block_errors)
        checks[r] = response_check(r, fits[r], test.better, test.margin, r in primary, n_cells, reps, test.at[0])
        checks[r].margin_of = (margins.get(r) or {}).get("of", "")
        settle = _Settle(how.binding or {}, test.at[2] if how.levels is not None else None, how.frozen, bool(block),
                         reps, n_cells, how.plan, per_test)
        verdicts += [settle(_verdict(c, ms.models[r], test, r in primary and c.group in terms), test.scale)
                     for c in found[r]]
    decision = Decision(alpha, how.adjust, per_test, family, checks, verdicts, terms,
                        levels={r: t.at for r, t in tests.items()})
    decision.simple = _simple(fits, rows, ms.models, factors, primary, terms, tests)
    for r in responses:
        noise_and_caveats(decision, r, rows[r], ms.models[r], rules, how.block_errors == "pooled" and bool(block)
                           and r in primary)
    return decision


def _test_of(r: str, margins: dict, rules: Registry, family: int, per_test: float, levels, scale: float) -> _Test:
    """A response's `_Test`: its declared margin and better direction (the registry's where
    it states none), and the look's levels for it (alpha* at both sides where no plan)."""
    m = margins.get(r) or {}
    at = levels(r, per_test) if levels is not None else (per_test, per_test, 0)
    at_df = (lambda df: levels(r, per_test, df)[:2]) if levels is not None else None
    return _Test(r, m.get("margin"), m.get("better") or rules.better(r), family, at, at_df, scale)


@dataclass(frozen=True)
class _Settle:
    """What a look makes of a contrast's verdict (`decide_all`): an earlier look's decision
    where one binds it, nothing tested under MIN_DF or at a look shown as recorded (`frozen`),
    identical levels named, an undecided family term's next step priced, a wide interval's
    reason said."""
    binding: dict[str, dict]
    look: int | None
    frozen: str
    blocks: bool  # the runs are in replicate blocks (more of them can be priced)
    reps: int
    n_cells: int
    plan: PlanPrices | None
    per_test: float

    def __call__(self, v: Verdict, scale: float) -> Verdict:
        _at_look(v, self.binding, self.look)
        if self.frozen and v.in_family and v.decided_at is None:  # open at the recorded look: waits for the next
            v.verdict, v.untested, v.few = UNDECIDED, True, self.frozen
        mark_identical(v, scale)
        if v.verdict == UNDECIDED and self.blocks and v.in_family and not v.identical:
            _price_blocks(v, self.reps, self.n_cells, self.plan, self.per_test)
        say_few(v, self.reps)
        return v


def control_cells(df: pd.DataFrame) -> list[str]:
    """The sweep's control cells (`control=<name>`, `trials.expand`), sorted."""
    return sorted(c for c in df["cell"].unique() if str(c).startswith("control="))


def decide_look(sweep: SweepFrame, responses: list[str], declared: dict[str, dict], look: LookResult,
                models: Models, prices: PlanPrices | None, adjust: str = "bonferroni") -> Decision:
    """A sweep's verdicts at a look, from its record: `decide_all` over the family the record
    declares (its primary terms, named contrasts and pure-CE control), on the plan's block
    errors, at the look's levels and with its earlier looks' decisions binding. `declared`:
    the primary responses' margins (`analysis.margins.margins_for`)."""
    df, record = sweep.runs, sweep.record
    control = next(iter(control_cells(df)), None)
    how = DecideSettings(adjust, control, record.primary_terms or None, rules=sweep.registry,
                         contrasts=record.contrasts, models=models, plan=prices,
                         block_errors=look.plan.block_errors if look.plan is not None else "own",
                         levels=look.levels, binding=look.binding(), frozen=look.frozen())
    return decide_all(df, responses, list(sweep.factors), declared, look.family_alpha, how)


def _family(found: dict[str, list[Contrast]], responses: list[str], margins: dict,
            terms: list[str]) -> tuple[list[str], list[str], int]:
    """(the primary terms, the primary responses, the family's size m)."""
    primary = [r for r in responses if r in margins] or list(responses)
    family = sum(c.group in terms for r in primary for c in found[r])
    if family == 0:
        raise AnalysisError(f"none of the primary terms ({', '.join(terms)}) can be estimated from these runs")
    return list(terms), primary, family


def _at_look(v: Verdict, binding: dict[str, dict], look: int | None) -> None:
    """The verdict as this look gives it: an earlier look's decision where one was made
    (binding), undecided where its own error has too few df or no look so far tests it (look
    0), else decided here (look None: no plan's look)."""
    if v.in_family and (rec := binding.get(f"{v.response}|{v.term}")) is not None:
        v.bind(rec)
    elif v.df < MIN_DF or look == 0:  # too few blocks: nothing is tested
        v.verdict, v.untested = UNDECIDED, True
    elif v.in_family and look and v.verdict != UNDECIDED:
        v.decided_at = look


def _blocks(data: pd.DataFrame, block: str | None) -> int:
    return int(data[block].nunique()) if block else 1


def _verdict(c: Contrast, model: variance.Model, test: _Test, in_family: bool) -> Verdict:
    """One contrast decided on the error its variance model gives it (a control's own
    paired errors where it has no model row). `test.at_df(df)`: the look's (two-sided,
    one-sided) nominal levels for a t statistic on df degrees of freedom, where a plan's
    boundaries are calibrated to the df (`LookResult.levels`); `test.at`'s where None."""
    noise = model.noise(c.L) if c.L is not None else c.noise
    c = replace(c, errors=c.errors or (noise.source if noise else model.fit.errors))
    if noise is not None:
        c = replace(c, se=noise.se, df=noise.df)
    alpha_star, alpha_eq = test.at[:2]
    if test.at_df is not None and np.isfinite(c.df) and c.df >= 1:
        alpha_star, alpha_eq = test.at_df(float(c.df))
    tiny = IDENTICAL * test.scale
    if test.scale > 0 and 0 <= c.se <= tiny and abs(c.estimate) <= tiny:
        # identical values at its levels (`mark_identical`): tested at the threshold, never on a se of 0
        # (whose df, a ratio of zeros, say nothing either)
        df = float(c.df) if np.isfinite(c.df) and c.df >= 1 else 1.0
        v = decide(replace(c, se=tiny, df=df), test.response, alpha_star, test.margin, test.better, test.family,
                   in_family, alpha_eq)
        v.se, v.noise = c.se, noise
        return v
    v = decide(c, test.response, alpha_star, test.margin, test.better, test.family, in_family, alpha_eq)
    v.noise = noise
    if in_family and c.L is not None:
        v.block = model.tests.get(tuple(c.group.split(":")))
    return v


def _price_blocks(v: Verdict, reps: int, n_cells: int, plan: PlanPrices | None, per_test: float) -> None:
    """An undecided family term's next step in blocks, within the plan where there is one
    (`per_test`: alpha* / alpha, the family's split of a look's alpha)."""
    most = plan.blocks_left if plan is not None else MAX_BLOCKS
    alpha_at = (lambda b: plan.alpha_at(b, per_test)) if plan is not None else None
    k = v.blocks = blocks_to_decide(v, reps, n_cells, alpha_at=alpha_at, most=most) if most > 0 else None
    if k:
        v.next_step = (f"{k} more block(s) ({k * n_cells} trials) would decide it ({DECISION_POWER:.0%}, if the "
                       "effect is as estimated)")
    elif plan is not None:
        v.next_step = (f"the plan's remaining {most} block(s) would not decide it"
                       if most > 0 else "the plan has no blocks left")
    else:
        v.next_step = f"more than {MAX_BLOCKS} more replicate blocks would be needed"


def _every_contrast(fit: Fit, rows: pd.DataFrame, runs: pd.DataFrame, response: str, factors: list[str],
                    how: DecideSettings) -> list[Contrast]:
    """One response's contrasts: every estimable term's, the named ones, the control's (on
    its own paired errors unless the plan pools the block errors)."""
    found = term_contrasts(fit, rows, factors)
    for name, sides in (how.contrasts or {}).items():
        if (c := named_contrast(fit, factors, name, sides)) is not None:
            found.append(c)
    if how.control is not None:
        c = control_contrast(runs, response, how.control, "replicate")
        own = how.block_errors != "pooled" and how.block_tests
        noise = control_noise(runs, response, how.control, how.rules) if own else None
        found.append(replace(c, noise=noise, errors="") if noise is not None else c)
    return found


def _check_settings(adjust: str, alpha: float) -> None:
    if adjust not in ADJUSTMENTS:
        raise AnalysisError(f"adjust: one of {', '.join(ADJUSTMENTS)}, got {adjust!r}")
    if not 0 < alpha < 0.5:
        raise AnalysisError(f"alpha: must lie in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got {alpha!r}")


def _simple(fits: dict[str, Fit], rows: dict[str, pd.DataFrame], models: dict[str, variance.Model],
            factors: list[str], primary: list[str], terms: list[str], tests: dict[str, _Test]) -> list[SimpleEffect]:
    """Each primary main effect at every combination of the other factors' levels, decided
    at alpha* outside the family: what "it holds at every level" must rest on. Each is judged
    on the error model of its main effect (every term it spans on its own block x term error,
    unless the plan pools), and like it, not tested on an error of fewer than MIN_DF df."""
    out = []
    if len(factors) < 2:
        return out
    for r in primary:
        test = tests[r]
        for f in [t for t in terms if t in factors]:
            for where, c in simple_effects(fits[r], rows[r], factors, f):
                v = _verdict(c, models[r], test, False)
                if v.df < MIN_DF or test.at[2] == 0 and test.at_df is not None:  # as its main effect: untested
                    v.verdict, v.untested = UNDECIDED, True
                mark_identical(v, test.scale)
                out.append(SimpleEffect(r, c.term, where, v))
    return out
