"""Looks: every analysis that prints verdicts is one, and the stopping rule that keeps false
verdicts at alpha across them.

A look is identified by the data it saw: which runs (cell and replicate block) and each
run's evaluation (prompts decoded, held-out batches, timing rounds). The same report on the
same data is the same look and spends nothing; a re-evaluation with more prompts is a new
look, as a new block is.

A sweep's sequential plan is declared in its spec before the first look (`sequential:
{max_replicates, alpha, max_<kind>...}`, the kinds the workload's `sequential_fields` name,
recorded on the parent run at `trials run`). Alpha is spent on an information scale, t = I_k / I_max, I the inverse
variance of a response's contrasts. With the evaluation's share of a response's noise split
off (`analysis.variance`), a run's variance is sigma_seed^2 + v / n for an evaluation of n
items (prompts or batches, v the per-item evaluation variance), so a response's fraction is

    t = (b / b_max) * (sigma_seed^2 + v / n_max) / (sigma_seed^2 + v / n)

(b blocks, n items now; b_max, n_max the plan's). More prompts thus count as information, not
as a free look; a response without an evaluation share (a timed one, or one whose runs
carry no jackknife records) counts blocks alone. Each look records every primary response's
own fraction (its mean is the look's `t`, which the label shows).

Each hypothesis of the family (a primary response x a primary term) has its share of alpha,
alpha* = alpha / m (Bonferroni across the family), spent over its own looks by the
Lan-DeMets Pocock-type function with group-sequential boundaries (`analysis.boundaries`):
look k tests at the nominal level whose boundary makes the chance of a first crossing at
look k, given the joint distribution of the looks' statistics, equal to spent(t_k) -
spent(t_{k-1}). The looks compute t statistics on few df (a term's own error has b - 1):
their boundaries are calibrated to those df (`t_levels`, simulated), since the normal
boundaries' levels applied to t statistics spend more than alpha (1.04-1.17x at 3-9 df). Looks are binding: a hypothesis decided at a look (any
verdict but undecided) is recorded there (`Look.decided`) and stays decided, later looks
show that verdict with its look, level and interval and test only the open ones; a response
whose information did not grow since its last look (a timed response after a re-evaluation
with more prompts) is not tested again: its verdicts are those of that look, at its level.

A sweep with no plan gets one fixed-sample analysis at alpha. A later look at other data is
post hoc and says so; so is every look under a plan added after a look (`trials augment
--post-hoc`), and under a plan recorded before plans were declared in specs.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from trials.store.items import SPLIT_PREFIX

from .boundaries import MIN_STEP, nominal_levels, spent, t_levels
from .look_record import Look, as_number

MAX_LOOKS_PAST_BLOCKS = 20  # looks a plan may record beyond one per block: re-evaluations with more items
MIN_DF = 3  # a term's own error on fewer df tests nothing (analysis.result_types.MIN_DF)

RULE = ("Lan-DeMets alpha spending, Pocock-type, on each response's information scale; group-sequential boundaries "
        "for the t statistics on their df (simulated calibration; exact for normal statistics); binding looks")
CAP_PREFIX = "max_"  # a plan's `max_<kind>`: the most items of that kind a re-evaluation may reach
# the run's evaluation: what a re-evaluation or a timing pass changes (columns of the frame):
# the engine's two standing kinds of evaluation item, decoded prompts and held-out batches
# (each counted in `split/<kind>`: the kinds, not metric names, so that a workload's count of
# either kind is read as one), then the timing pass's; a workload's own kinds follow
# (`fingerprint`'s counts). Fixed, in this order: every recorded look's fingerprint hashes them.
EVALUATION_COLUMNS = {**{kind: SPLIT_PREFIX + kind for kind in ("prompts", "eval_batches")},
                      "timing_rounds": "timing/rounds", "timing_prompts": "timing/prompts"}
TIMING = ("timing_rounds", "timing_prompts")  # the timing pass's part of a run's evaluation: no re-evaluation raises it
LEGACY = ("a plan recorded by trials augment after the sweep had been analysed, before plans were declared in "
          "specs")


@dataclass(init=False)
class Plan:
    """A sweep's looks. `max_replicates` None: no plan was declared (one fixed-sample
    analysis). `max_items`: the most items of each evaluation kind (a key of a look's
    `evaluation`) a re-evaluation may reach, given as `max_<kind>=N` as a spec declares it
    (`Plan(6, 0.05, max_prompts=96)`). `declared`: the plan was in the spec before the first
    look; `post_hoc` says why not where it was not."""
    max_replicates: int | None
    alpha: float = 0.05
    max_items: dict = field(default_factory=dict)
    declared: bool = True
    post_hoc: str = ""
    looks: list[Look] = field(default_factory=list)
    rule: str = RULE
    block_errors: str = "own"  # how block x term enters a term's error (analysis.result_types.BLOCK_ERRORS)
    look_every: int | None = None  # blocks `trials augment --until-decided` adds between looks (None: one)

    def __init__(self, max_replicates: int | None, alpha: float = 0.05, *, declared: bool = True, post_hoc: str = "",
                 block_errors: str = "own", look_every: int | None = None, **more):
        """`more`: `max_<kind>=N` each, or `max_items` whole (a dict: no kind is called
        "items"); `looks` and `rule` (as `dataclasses.replace` gives them)."""
        looks, rule, items = more.pop("looks", None), more.pop("rule", RULE), more.pop("max_items", None) or {}
        if not isinstance(items, dict):
            raise TypeError(f"Plan: max_items is every kind's maximum, a dict, not {type(items).__name__}")
        not_caps = [k for k in more if not k.startswith(CAP_PREFIX) or k == "max_replicates"]
        if not_caps:
            raise TypeError(f"Plan: no argument {not_caps[0]!r} (an evaluation's maximum is max_<kind>)")
        self.max_replicates, self.alpha, self.declared, self.post_hoc = max_replicates, alpha, declared, post_hoc
        self.max_items = {**dict(items), **{k[len(CAP_PREFIX):]: v for k, v in more.items() if v is not None}}
        self.looks, self.rule, self.block_errors, self.look_every = list(looks or []), rule, block_errors, look_every
        self.__post_init__()

    def __post_init__(self):
        if self.block_errors == "test":  # the preliminary-test rule of older plans: read under today's default
            self.block_errors = "own"
        if self.block_errors not in ("own", "pooled"):
            raise ValueError(f"block_errors: 'own' or 'pooled', got {self.block_errors!r}")
        if self.max_replicates is not None and not (isinstance(self.max_replicates, int)
                                                    and self.max_replicates >= 2):
            raise ValueError(f"max_replicates: an integer >= 2, got {self.max_replicates!r}")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha: must lie in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got {self.alpha!r}")
        if self.look_every is not None and not (isinstance(self.look_every, int) and self.look_every >= 1):
            raise ValueError(f"look_every: an integer >= 1, got {self.look_every!r}")
        wrong = [k for k, v in self.max_items.items() if isinstance(v, bool) or not isinstance(v, int) or v < 1]
        if wrong:
            raise ValueError(f"{CAP_PREFIX}{wrong[0]}: an integer >= 1, got {self.max_items[wrong[0]]!r}")

    @property
    def planned(self) -> bool:
        return self.max_replicates is not None

    def find(self, data: str, blocks: int, timed: str = "") -> Look | None:
        """The recorded look at this data, timed values included. A legacy look, recorded
        without a fingerprint, is found by its number of blocks; one recorded without the
        timed values' digest (before looks kept it) by its data, until `look` seals it with
        the timed values it is first matched on."""
        for look in self.looks:
            if (look.data == data and look.timed == timed) or (not look.data and look.blocks == blocks):
                return look
        for look in self.looks:
            if look.data == data and not look.timed and timed and look is self.looks[-1]:
                return look
        return None

    def look(self, data: str, blocks: int, evaluation: dict, t: float = 1.0, timed: str = "",
             what_if: bool = False, fractions: dict | None = None) -> tuple[Look, bool]:
        """The look at this data: the recorded one, or a new one appended (with information
        fraction `t`, used under a plan). Returns (look, new). A look at the data of the last
        one with other timed values (a timing pass again) adds no information on the plan's
        scale, which counts blocks and items, so no alpha is left for it: refused with a
        ValueError saying so, unless `what_if` (tested at a given alpha, never recorded)."""
        found = self.find(data, blocks, timed)
        if found is not None:
            if timed and not found.timed and found.data == data:
                found.timed = timed  # sealed: the next timing pass is new data
            return found, False
        if not self.planned:
            # the fixed-sample analysis, once; any later look at other data is post hoc
            look = Look(data, blocks, evaluation, 1.0, self.alpha, post_hoc=bool(self.looks), timed=timed,
                        fractions={r: 1.0 for r in fractions or {}})
        else:
            if blocks > self.max_replicates:
                raise ValueError(f"{blocks} replicate blocks exceed the plan's maximum of {self.max_replicates}")
            before = self.looks[-1].t if self.looks else 0.0
            t_k = min(1.0, max(float(t), before))
            alpha = spent(t_k, self.alpha) - spent(before, self.alpha)
            if alpha <= 0 and not what_if:
                raise ValueError(self._no_alpha(data, t_k, blocks))
            ts = {r: min(1.0, max(float(f), self._last(r))) for r, f in (fractions or {}).items()}
            look = Look(data, blocks, evaluation, t_k, alpha, post_hoc=not self.declared, timed=timed, fractions=ts)
        self.looks.append(look)
        return look, True

    def _no_alpha(self, data: str, t: float, blocks: int = 0) -> str:
        """Why a new look has no alpha to test at, in one line."""
        last = len(self.looks)
        most = max((x.blocks for x in self.looks), default=0)
        if blocks < most:  # a subset of what the plan looked at (an export cut down, runs left out)
            return (f"these runs hold {blocks} replicate block(s), fewer than the {most} that look {last} of the plan "
                    "saw: a subset of its runs is no look of the plan; see it as a what-if, unrecorded (--alpha A)")
        if self.looks and self.looks[-1].data == data:
            why = (f"the same runs and evaluation as look {last}, with other timed values (a timing pass again): "
                   "re-timing adds no information on the plan's scale (blocks and items), and look "
                   f"{last}'s verdicts stand")
        else:
            why = (f"this data adds no information on the plan's scale beyond look {last} (information "
                   f"{t:.0%})")
        return (f"no alpha left for a new look: {why}; add blocks within the plan (trials augment) or see it as a "
                "what-if, unrecorded (--alpha A)")

    def _last(self, response: str) -> float:
        """A response's largest information fraction so far (0: no look)."""
        return max([x.fractions.get(response, x.t) for x in self.looks], default=0.0)

    def tests_at(self, blocks: int) -> bool:
        """Whether a look at `blocks` blocks tests anything: a term's own error needs MIN_DF df
        (pooled errors have enough at any size)."""
        return self.block_errors == "pooled" or blocks - 1 >= MIN_DF

    def tested(self, index: int, response: str) -> list[int]:
        """The 1-based looks up to `index` at which `response` was tested: those at which its
        information grew (by at least MIN_STEP) since the last one tested, and whose blocks
        leave a term's own error MIN_DF df or more (a look with fewer tests nothing, so the
        first look that tests spends all the alpha its fraction allows)."""
        out, last = [], 0.0
        for i, x in enumerate(self.looks[:index]):
            t = x.fractions.get(response, x.t)
            if not self.tests_at(x.blocks):
                continue
            if t >= last + MIN_STEP and t > 0:
                out.append(i + 1)
                last = t
        return out

    def levels(self, index: int, response: str, per_test: float,
               df: float | None = None) -> tuple[float, float, int]:
        """(two-sided nominal level, one-sided nominal level, the look it comes from) at which
        look `index` tests a hypothesis of `response` whose share of alpha is `per_test`: the
        group-sequential boundaries of its own looks so far, for t statistics on `df` degrees
        of freedom at this look (`analysis.boundaries.t_levels`; the earlier looks' df scaled
        with their blocks, b - 1, as a term's own, a paired and a pooled error's all grow),
        or for normal ones where `df` is None (`nominal_levels`). Under no plan, the
        fixed-sample levels. A response with no new information at this look keeps the levels
        of the look it was last tested at. Look 0: no look so far tests it (too few blocks for a
        term's own error): nothing is decided (the levels are only for the intervals shown)."""
        if not self.planned:
            return per_test, per_test, index
        looks = self.tested(index, response)
        if not looks:
            return per_test, per_test, 0
        ts = [self.looks[i - 1].fractions.get(response, self.looks[i - 1].t) for i in looks]
        if df is None or not math.isfinite(df):
            return nominal_levels(ts, per_test, 2)[-1], nominal_levels(ts, per_test, 1)[-1], looks[-1]
        dfs = self.dfs(looks, df)
        return t_levels(ts, dfs, per_test, 2)[-1], t_levels(ts, dfs, per_test, 1)[-1], looks[-1]

    def dfs(self, looks: list[int], df: float) -> list[float]:
        """The df of a hypothesis at each of `looks` (1-based), `df` at the last: scaled with
        the looks' blocks (b - 1)."""
        last = max(self.looks[looks[-1] - 1].blocks - 1, 1)
        return [max(1.0, df * max(self.looks[i - 1].blocks - 1, 1) / last) for i in looks[:-1]] + [max(1.0, df)]

    def binding(self, index: int) -> dict[str, dict]:
        """The hypotheses decided at looks before `index` (1-based): "response|term" -> what
        was decided, with the look ("look")."""
        out = {}
        for i, x in enumerate(self.looks[:index - 1]):
            for key, rec in x.decided.items():
                out.setdefault(key, {**rec, "look": i + 1})
        return out

    def spent_alpha(self) -> float:
        return sum(look.alpha for look in self.looks) if self.planned else float("nan")

    def to_json(self) -> str:
        """The record, each evaluation maximum under its spec's key (`max_<kind>`)."""
        d = {"max_replicates": self.max_replicates, "alpha": self.alpha,
             **{CAP_PREFIX + k: v for k, v in self.max_items.items()}}
        d.update({k: v for k, v in asdict(self).items() if k not in (*d, "max_items", "looks")})
        d["looks"] = [asdict(look) for look in self.looks]
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """A recorded plan; one line naming the record where it is not one (a crafted parquet
        export, a damaged tag)."""
        try:
            return cls._parse(text)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError, OverflowError) as e:
            raise ValueError(f"the sequential record is malformed ({type(e).__name__}: {str(e)[:200]})") from None

    @classmethod
    def _parse(cls, text: str) -> "Plan":
        """A recorded plan. One recorded before plans were declared (no `declared` key: the
        looks of `trials augment`, keyed on blocks alone) is read as post hoc."""
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        legacy = "declared" not in d
        reps = d.get("max_replicates")
        caps = {k: _int_or_none(v) for k, v in d.items() if k.startswith(CAP_PREFIX) and k not in ("max_replicates",
                                                                                                    "max_items")}
        plan = cls(int(reps) if reps is not None else None, float(d.get("alpha", 0.05)),
                   declared=bool(d.get("declared", False)), post_hoc=str(d.get("post_hoc") or (LEGACY if legacy else "")),
                   block_errors=str(d.get("block_errors") or "test"), look_every=_int_or_none(d.get("look_every")),
                   **caps)
        for i, look in enumerate(d.get("looks", [])):
            if legacy:  # block counts only: rebuild their fractions and alphas as the old rule spent them
                n = int(look)
                before = plan.looks[-1].t if plan.looks else 0.0
                t = n / plan.max_replicates
                plan.looks.append(Look("", n, {}, t, spent(t, plan.alpha) - spent(before, plan.alpha), True))
            else:
                plan.looks.append(Look.from_record(look))
            last = plan.looks[-1]
            if not (last.blocks >= 1 and 0 <= last.t <= 1 and 0 <= last.alpha <= 1
                    and all(0 <= f <= 1 for f in last.fractions.values())):
                raise ValueError(f"look {i + 1}: blocks >= 1, t and alpha in [0, 1], got {last.blocks}, {last.t}, "
                                 f"{last.alpha}")
        if plan.planned and not legacy:
            plan.check_spending()
        return plan

    def check_spending(self) -> None:
        """ValueError, naming the look, where the looks are not what this plan's rule records:
        each within the plan's blocks, its information at least the last look's, its alpha the
        rule's spending between them (so that no record spends past the plan's alpha), and no
        more looks than blocks and re-evaluations can give (MAX_LOOKS_PAST_BLOCKS)."""
        if len(self.looks) > self.max_replicates + MAX_LOOKS_PAST_BLOCKS:
            raise ValueError(f"{len(self.looks)} looks, more than a plan of {self.max_replicates} blocks records "
                             f"(one per block and at most {MAX_LOOKS_PAST_BLOCKS} re-evaluations)")
        before = 0.0
        for i, x in enumerate(self.looks):
            if x.blocks > self.max_replicates:
                raise ValueError(f"look {i + 1}: {x.blocks} blocks, past the plan's maximum of {self.max_replicates}")
            if x.t < before:
                raise ValueError(f"look {i + 1}: information {x.t:g}, less than look {i}'s {before:g}")
            want = spent(x.t, self.alpha) - spent(before, self.alpha)
            if not math.isclose(x.alpha, want, rel_tol=1e-9, abs_tol=1e-15):
                raise ValueError(f"look {i + 1}: alpha {x.alpha:.6g}, but the plan's spending gives {want:.6g} "
                                 f"between information {before:g} and {x.t:g} (alpha {self.alpha:g})")
            before = x.t

    def departs_from(self, declared: "Plan") -> str:
        """How this recorded plan departs from the one declared when its sweep was created (""
        where it does not): its maximum, alpha, evaluation maxima and error rule cannot change
        between looks; a look_every may fill one that names none (`trials augment`)."""
        for name in ("max_replicates", "alpha", "declared", "block_errors"):
            if getattr(self, name) != getattr(declared, name):
                return f"its {name} is {getattr(self, name)!r}, the declared plan's {getattr(declared, name)!r}"
        for kind in sorted({*self.max_items, *declared.max_items}):
            if self.max_items.get(kind) != declared.max_items.get(kind):
                return (f"its {CAP_PREFIX}{kind} is {self.max_items.get(kind)!r}, the declared plan's "
                        f"{declared.max_items.get(kind)!r}")
        if declared.look_every is not None and self.look_every != declared.look_every:
            return f"its look_every is {self.look_every!r}, the declared plan's {declared.look_every!r}"
        return ""


def _int_or_none(v) -> int | None:
    return None if v is None else int(v)


def fingerprint(data: pd.DataFrame, counts: dict[str, str] | None = None) -> tuple[str, int, dict]:
    """(the data's fingerprint, its replicate blocks, its evaluation): which runs, and each
    run's evaluation (prompts, held-out batches, timing rounds, and the workload's own
    `counts`, {kind: column}, after them: `item_kinds.evaluation_counts`)."""
    cols = {k: c for k, c in {**EVALUATION_COLUMNS, **(counts or {})}.items() if c in data.columns}
    # column by column (a row at a time costs seconds at thousands of runs), each value as
    # str() of its Python value, which is what a row's value prints as
    parts = [data["cell"].astype(object).map(str), data["replicate"].astype(object).map(str)]
    parts += [data[c].astype(object).map(lambda v: f"{as_number(v):g}") for c in cols.values()]
    rows = sorted("|".join(r) for r in zip(*parts))
    digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
    evaluation = {}
    for k, c in cols.items():
        v = pd.to_numeric(data[c], errors="coerce").dropna()
        if len(v):
            evaluation[k] = float(v.median())
    blocks = int(data["replicate"].nunique()) if "replicate" in data.columns else 1
    return digest, blocks, evaluation


def information_fraction(plan: Plan, blocks: int, evaluation: dict, shares: dict[str, tuple[str, float]]) -> float:
    """t = I_k / I_max (module docstring), averaged over the primary responses. `shares`:
    response -> (the evaluation kind it varies with, a key of the plan's `max_items`, or "";
    and the evaluation's share of its residual variance now, 0 where unknown)."""
    if not plan.planned:
        return 1.0
    f = information_fractions(plan, blocks, evaluation, shares or {"": ("", 0.0)})
    return float(min(1.0, np.mean(list(f.values()))))


def information_fractions(plan: Plan, blocks: int, evaluation: dict,
                          shares: dict[str, tuple[str, float]]) -> dict[str, float]:
    """Each response's own t = I_k / I_max (module docstring; 1 under no plan)."""
    out = {}
    for r, (kind, share) in shares.items():
        if not plan.planned:
            out[r] = 1.0
            continue
        f = blocks / plan.max_replicates
        n = evaluation.get(kind) if kind else None
        n_max = plan.max_items.get(kind)
        if n and n_max and share and np.isfinite(share) and share > 0:
            share = min(share, 1.0)  # a share over 1 (the model misfits) counts as all evaluation
            seed, v = 1.0 - share, share * n  # in units of the residual variance now
            f *= (seed + v / max(n_max, n)) / (seed + v / n)
        # to the hundredth: the share it rests on is an estimate far coarser than that, and looks at
        # the same fractions share their boundaries (computed once, analysis.boundaries)
        out[r] = float(min(1.0, round(f, 2)))
    return out


def plan_of(record_json: str, alpha: float = 0.05) -> Plan:
    """The sweep's recorded plan, or a fixed-sample one where none was declared."""
    return Plan.from_json(record_json) if record_json else Plan(None, alpha, declared=False)
