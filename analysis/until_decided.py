"""`trials augment NAME --until-decided`'s looks: analyse the runs (each analysis a look of
the sweep's sequential plan, identified by the data it saw, recorded on the parent run), stop
when every term of the family is decided, at the plan's maximum of blocks, or when the next
block would pass the budget; otherwise add the plan's blocks (`trials.augment`) and look
again. The engine reaches it through the entry point `dspark_sweeps.deciders` (pyproject),
so that no module of the engine imports the statistics: the arrow points down, from the
statistics that decide to the engine that adds blocks."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from trials.augment import AugmentSettings, add_block, blocks_before_look, failed, finish_first, keep_on_parent
from trials.run_settings import RunSettings
from trials.store.client import set_tags, tracking_client
from trials.store.keys import PLAN_PARAM, SEQUENTIAL_TAG, read_split_tag, sweep_parent

from .anova import AnalysisError
from .plan import median_minutes
from .publish import log_to_parent, record_look
from .report import build_report
from .sequential import Plan, plan_of
from .sweep_reader import load_runs


@dataclass
class Look:
    replicates: int
    alpha: float
    counts: dict[str, int]
    action: str
    label: str = ""  # the look as the report names it

    def text(self) -> str:
        c = [self.counts.get(k, 0) for k in ("matters, beyond the margin", "matters, size unsure", "negligible",
                                             "undecided")]
        told = (f"{c[0]} matter beyond the margin, {c[1]} matter (size unsure), {c[2]} negligible, "
                f"{c[3]} undecided")
        return f"look at {self.replicates} replicate blocks (alpha {self.alpha:.3g}): {told} -> {self.action}"


@dataclass(frozen=True)
class _Watch:
    """What every look of one `--until-decided` shares: the store, the parent run, the plan,
    when it started (for the budget), and the looks so far."""
    uri: str
    client: Any
    parent: str
    plan: Any
    started: float
    looks: list[Look]


def until_decided(spec, running: RunSettings, settings: AugmentSettings, pending: dict | None = None) -> dict:
    started = time.monotonic()
    block_s: float | None = None
    uri, say = running.tracking_uri, settings.say
    client = tracking_client(uri)
    exp = client.get_experiment_by_name(spec.name)
    found = [p for p in [sweep_parent(client, exp.experiment_id)] if p is not None] if exp else []
    # refused before any work
    plan = plan_for(found[0].data.tags if found else {}, spec.replicates, settings.max_replicates, settings.alpha,
                 settings.post_hoc, settings.look_every)
    spec, out, wait = finish_first(spec, running, pending, say)
    parent = out["parent_run_id"]
    watch = _Watch(uri, client, parent, plan, started, looks=[])
    looks = watch.looks
    keep_on_parent(client, parent, spec.name, "plan", {SEQUENTIAL_TAG: plan.to_json()})
    set_tags(client, parent, {SEQUENTIAL_TAG: plan.to_json()})
    if not plan.looks and PLAN_PARAM not in client.get_run(parent).data.params:  # a plan this augment adds
        client.log_param(parent, PLAN_PARAM, plan.to_json())
    while True:
        if wait:  # no binding look on timed values the tool calls busy
            return {"looks": looks, "stopped": f"stop: {wait}", "replicates": spec.replicates, "ok": False}
        sweep = load_runs(spec.name, uri)
        block_s = block_s or _block_estimate_s(sweep.runs, spec)
        try:
            rep, why_not = _report(sweep), ""
        except AnalysisError as e:
            rep, why_not = None, str(e)
        if rep is None:  # not a look: nothing is decided, and no alpha is spent
            if spec.replicates >= plan.max_replicates:
                return {"looks": looks, "stopped": f"stop: cannot analyse at the maximum of {plan.max_replicates} "
                        f"blocks ({why_not})", "replicates": spec.replicates, "ok": False}
            say(f"{spec.name}: {spec.replicates} replicate block(s) cannot be analysed yet ({why_not}) "
                f"-> add {blocks_before_look(plan, spec.replicates)} replicate block(s)")
        else:
            stop = _look(rep, sweep, spec, block_s, watch, settings)
            if stop:
                return {"looks": looks, "stopped": stop, "replicates": spec.replicates, "ok": True}
        step = blocks_before_look(plan, spec.replicates)
        spec, out, took, wait = add_block(spec, running, step)
        block_s = took / step
        if out["failed"]:
            return failed(out, looks, spec)


def _look(rep, sweep, spec, block_s: float | None, watch: _Watch, settings: AugmentSettings) -> str:
    """One look: its verdicts counted, recorded on the parent (when new) and said; returns
    why to stop, or ""."""

    counts = rep.decision.counts()
    step = blocks_before_look(watch.plan, spec.replicates)
    stop = stop_reason(rep.decision.undecided(), spec.replicates, watch.plan.max_replicates, settings.budget_minutes,
                        watch.started, None if block_s is None else block_s * step,
                        counts.get("matters, size unsure", 0))
    more = "add one replicate block" if step == 1 else f"add {step} replicate blocks (the plan looks every {step})"
    look = Look(spec.replicates, rep.look.alpha, counts, stop or more, rep.look.label())
    watch.looks.append(look)
    if rep.look.new or rep.look.sealed:
        record_look(sweep, watch.uri, rep.look.plan.to_json(), json.dumps({**look.__dict__}), rep.look.index)
        log_to_parent(rep, sweep, watch.uri)  # the parent's description is this look's answer (and a screening's link)
    keep_on_parent(watch.client, watch.parent, spec.name, "look", {},
                    {"augment/undecided": rep.decision.undecided()}, rep.look.index)
    watch.client.log_metric(watch.parent, "augment/undecided", rep.decision.undecided(), step=rep.look.index)
    settings.say(f"{spec.name}: {look.text()}")
    return stop


def plan_for(tags: dict, replicates: int, max_replicates: int | None, alpha: float, post_hoc: bool,
          look_every: int | None = None):
    """The sweep's plan (from its parent run), or one fixed now: before the first look a plan
    made here counts as declared; after one it is post hoc, refused unless `post_hoc`. A
    `look_every` given here fills a plan that names none (when the looks fall depends on no
    result); it cannot change one that does."""
    plan = recorded_plan(tags, replicates, max_replicates, alpha, post_hoc)
    if look_every is not None and plan.look_every not in (None, look_every):
        raise ValueError(f"--look-every: this sweep's plan looks every {plan.look_every} blocks; it cannot change")
    plan.look_every = plan.look_every or look_every
    return plan


def recorded_plan(tags: dict, replicates: int, max_replicates: int | None, alpha: float, post_hoc: bool):

    plan = plan_of(read_split_tag(tags, SEQUENTIAL_TAG), alpha)
    if plan.planned:
        if max_replicates is not None and max_replicates != plan.max_replicates:
            raise ValueError(f"--max-replicates: this sweep's plan allows {plan.max_replicates} blocks; "
                             "a plan cannot change between looks")
        if alpha != plan.alpha:
            raise ValueError(f"--alpha: this sweep's plan spends alpha {plan.alpha}; it cannot change between looks")
        return plan
    reps = max_replicates or max(3 * replicates, replicates + 2)
    if not plan.looks:
        return Plan(reps, alpha, declared=True, post_hoc="")
    seen = "; ".join(look.describe() for look in plan.looks)
    if not post_hoc:
        raise ValueError(f"augment: this sweep declared no sequential plan and has been analysed ({len(plan.looks)} "
                         f"look(s): {seen}); a plan added now is post hoc: rerun with --post-hoc to add one anyway "
                         "(every report will say so), or declare sequential: in the spec of a new sweep")
    return Plan(reps, alpha, declared=False,
                post_hoc=f"added by trials augment --post-hoc after {len(plan.looks)} look(s) ({seen})")


def _block_estimate_s(df, spec) -> float | None:
    """One block's time before any block ran here: the median trial's wall time times the
    trials of a block (as if they ran one at a time: an upper estimate)."""

    minutes = median_minutes(df, "run_s")
    return None if minutes is None else 60.0 * minutes * sum(1 for t in spec.trials if t.replicate == 0)


def _report(sweep):
    """The analysis of the primary responses at this data: a look of the sweep's plan."""

    return build_report(sweep, None, responses=list(sweep.record.responses))


def stop_reason(undecided: int, replicates: int, max_replicates: int, budget_minutes: float | None,
                 started: float, block_s: float | None, unsure: int = 0) -> str:
    if undecided == 0:
        sized = (f" ({unsure} of them {'matters with its' if unsure == 1 else 'matter with their'} size unsure: "
                 "whether beyond the margin is still open)"
                 if unsure else "")
        return f"stop: every term of the family is decided{sized}"
    if replicates >= max_replicates:
        return f"stop: {max_replicates} replicate blocks, the plan's maximum"
    if budget_minutes is not None and block_s is not None:
        used = (time.monotonic() - started) / 60.0
        if used + block_s / 60.0 > budget_minutes:
            return (f"stop: another block (about {block_s / 60:.1f} min) would pass the {budget_minutes:g}-minute "
                    f"budget ({used:.1f} min used)")
    return ""
