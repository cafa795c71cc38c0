"""`trials augment NAME`: more replicate blocks for a sweep in storage, or look after look
until every primary term is decided.

- `--replicates N` adds N blocks (new seeds, each block in its own randomised order, the
  shared target reused) and runs them.
- `--until-decided` repeats looks: analyse the runs (`analysis`; each analysis is a look of
  the sweep's sequential plan, identified by the data it saw, recorded on the parent run),
  stop when every term of the family (primary responses x primary terms) is decided, at the
  plan's maximum of blocks, or when the next block would pass `--budget-minutes`; otherwise
  add one block and look again. Each look tests at the alpha `analysis.sequential`'s
  spending rule gives it on the information scale, so repeated looks do not inflate false
  verdicts.

The plan is the spec's (`sequential:`, recorded at `trials run`). A sweep without one gets
a plan here only before its first look; after a look, adding one is post hoc and is
refused unless `--post-hoc` is given, and then every report says so.

Resume-safe, and a rerun never grows the sweep twice for one request:

- `--replicates N` records its target (`<storage>/<sweep>/augment.json`: the block count it
  is to reach and its command, written whole under the sweep's lease) before it adds
  anything, and removes the record once every trial of the target has finished and been
  evaluated like the rest. While the record is there, `trials augment NAME --replicates ...`
  continues to that target and adds nothing beyond it ("continuing to 3 blocks, as the
  interrupted augment asked"); once it is gone, the same command is a new request and adds N
  more. So a kill -9 after the new block's first trial, then the same command, ends at 3
  blocks, not 4. `trials resume` finishes the block's trials but leaves the record: the next
  augment then evaluates the block like the rest and clears it. A run whose trials failed
  keeps the record, so that rerunning the command reruns them rather than adding a block.
- `--until-decided` adds one block at a time, each saved with the spec before it trains:
  a rerun first finishes the saved block (`trials run` of the saved spec runs only what is
  unfinished), then looks; a look at the same data is the same look and spends no alpha
  twice, so an interrupted block is looked at once and never followed by a second one that
  the look did not ask for. It also completes a target an interrupted `--replicates` left.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from trials.store.keys import PLAN_PARAM, SEQUENTIAL_TAG, read_split_tag, sweep_parent
from trials.store.client import set_tags, tracking_client
from trials.store.kept import keep_parent_record, sweep_storage

from . import expand, saved
from .block_evaluation import evaluate_like_the_rest, unevenly_measured
from trials.store.kept import write_atomic
from .run_settings import RunSettings


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
class AugmentSettings:
    """What `augment` asks besides the sweep (also as its keywords of the same names).

    replicates, until_decided, look_every: N more blocks, or looks until decided (every N blocks, where no plan says).
    max_replicates, budget_minutes, alpha, post_hoc: the plan's most blocks, the time allowed, its alpha, a late plan.
    say: where the looks' lines go.
    """
    replicates: int | None = None
    until_decided: bool = False
    look_every: int | None = None
    max_replicates: int | None = None
    budget_minutes: float | None = None
    alpha: float = 0.05
    post_hoc: bool = False
    say: Callable[[str], Any] = print

    def __post_init__(self):
        replicates, look_every, budget_minutes = self.replicates, self.look_every, self.budget_minutes
        if (replicates is None) == (not self.until_decided):
            raise ValueError("augment: give --replicates N, or --until-decided")
        if replicates is not None and (not isinstance(replicates, int) or replicates < 1):
            raise ValueError(f"--replicates: an integer >= 1, got {replicates!r}")
        if look_every is not None and (not isinstance(look_every, int) or look_every < 1 or not self.until_decided):
            raise ValueError(f"--look-every: an integer >= 1, with --until-decided, got {look_every!r}")
        if budget_minutes is not None and not budget_minutes > 0:
            raise ValueError(f"--budget-minutes: a number > 0, got {budget_minutes!r}")


def augment(name: str, storage: str | None, tracking_uri: str | None = None, address: str | None = None, *,
            settings: AugmentSettings | None = None, **given) -> dict:
    """Add `settings.replicates` blocks, or look until decided (see the module docstring);
    `given`: any of AugmentSettings' fields by name, put over `settings`. Returns
    {"looks": [Look, ...], "stopped": reason, "replicates": blocks at the end, "ok": no trial failed}."""
    # no default AugmentSettings() to replace into: it asks for neither blocks nor looks, and is refused
    settings = replace(settings, **given) if settings is not None else AugmentSettings(**given)
    spec, meta = saved.load_saved(name, storage, "augment")
    uri = tracking_uri or meta["tracking_uri"]
    exp_dir = saved.storage_root(storage) / name
    pending = pending_target(exp_dir, spec.replicates)  # an interrupted augment's, checked as input
    if settings.until_decided and not spec.responses:
        raise ValueError(f"augment: sweep {name!r} declares no primary responses with margins "
                         "(responses: in its spec), so nothing can be decided")
    most = settings.max_replicates
    if most is not None and most < spec.replicates:
        raise ValueError(f"--max-replicates: {most} is fewer than the sweep's {spec.replicates} blocks")
    how = f"--replicates {settings.replicates}" if settings.replicates is not None else "--until-decided"
    running = RunSettings(tracking_uri=uri, storage=storage, address=address, max_concurrent=meta.get("max_concurrent"),
                          extend=True, command=f"trials augment {name} {how}")
    if settings.replicates is not None:
        return _add_blocks(spec, settings.replicates, pending, exp_dir, running, settings.say)
    return _until_decided(spec, running, settings, pending)


TARGET_FILE = "augment.json"  # in the sweep's storage folder while an `augment --replicates` is under way


def pending_target(exp_dir, replicates: int) -> dict | None:
    """The record an unfinished `augment --replicates` left ({"replicates": its target block
    count, "command": ...}), or None (none, or one the saved spec has already passed).
    A file that is not such a record is refused in one line naming it."""
    path = exp_dir / TARGET_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        record = None
    target = record.get("replicates") if isinstance(record, dict) else None
    if isinstance(target, bool) or not isinstance(target, int) or target < 1 \
            or not isinstance(record.get("command"), str):
        raise ValueError(f"augment: {path} is not an augment's record ({{\"replicates\": N, \"command\": ...}}); "
                         "delete it if no augment of this sweep is under way")
    return None if target < replicates else record  # one the saved spec has passed is stale: replaced when next written


def _add_blocks(spec, replicates: int, pending: dict | None, exp_dir, running: RunSettings, say) -> dict:
    """`--replicates N`: to the target an interrupted augment recorded, else to N more
    blocks, recorded (under the lease, before anything is added) and cleared once reached."""
    from . import runner

    if pending is not None:
        target = pending["replicates"]
        say(f"{spec.name}: continuing to {target} replicate blocks, as the interrupted augment asked "
            f"(`{pending['command']}`); this adds none beyond them (run the command again for more)")
        done = f"continued to {target} blocks, as the interrupted augment asked"
        record = None
    else:
        target, done = spec.replicates + replicates, f"added {replicates} block(s)"
        planned = spec.sequential.get("max_replicates")
        if planned and target > planned:
            raise ValueError(f"--replicates: {spec.replicates} + {replicates} blocks pass the sweep's sequential "
                             f"plan of at most {planned}")
        record = json.dumps({"replicates": target, "command": running.command})
    spec = expand.with_replicates(spec, target)
    out = runner.run(spec, running, leased=None if record is None else
                     (lambda d: write_atomic(d / TARGET_FILE, record)))
    evaluate_like_the_rest(spec, running)
    if out["failed"] == 0:
        (exp_dir / TARGET_FILE).unlink(missing_ok=True)  # reached: the same command again is a new request
    return {"looks": [], "stopped": done, "replicates": spec.replicates, "run": out, "ok": out["failed"] == 0}


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


def _until_decided(spec, running: RunSettings, settings: AugmentSettings, pending: dict | None = None) -> dict:
    from analysis.anova import AnalysisError
    from analysis.sweep_reader import load_runs

    started = time.monotonic()
    block_s: float | None = None
    uri, say = running.tracking_uri, settings.say
    client = tracking_client(uri)
    exp = client.get_experiment_by_name(spec.name)
    found = [p for p in [sweep_parent(client, exp.experiment_id)] if p is not None] if exp else []
    # refused before any work
    plan = _plan(found[0].data.tags if found else {}, spec.replicates, settings.max_replicates, settings.alpha,
                 settings.post_hoc, settings.look_every)
    spec, out, wait = _finish_first(spec, running, pending, say)
    parent = out["parent_run_id"]
    watch = _Watch(uri, client, parent, plan, started, looks=[])
    looks = watch.looks
    _keep_on_parent(client, parent, spec.name, "plan", {SEQUENTIAL_TAG: plan.to_json()})
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
                f"-> add {_step(plan, spec.replicates)} replicate block(s)")
        else:
            stop = _look(rep, sweep, spec, block_s, watch, settings)
            if stop:
                return {"looks": looks, "stopped": stop, "replicates": spec.replicates, "ok": True}
        step = _step(plan, spec.replicates)
        spec, out, took, wait = _add_block(spec, running, step)
        block_s = took / step
        if out["failed"]:
            return _failed(out, looks, spec)


def _finish_first(spec, running: RunSettings, pending: dict | None, say):
    """Before the first look: the blocks an interrupted `--replicates` asked for, whatever an
    interrupted augment left unrun, evaluated and timed like the rest (a confirmation of a
    timed response is timed here for its first look). Returns (spec, the run's result, why a
    look must wait or "")."""
    from . import runner

    if pending is not None:  # an interrupted `--replicates` asked for these blocks: they come first
        say(f"{spec.name}: continuing to {pending['replicates']} replicate blocks, as the interrupted augment asked "
            f"(`{pending['command']}`)")
        spec = expand.with_replicates(spec, pending["replicates"])
    out = runner.run(spec, running)  # finish what an interrupted augment left (runs nothing otherwise)
    wait = ""
    if pending is not None or unevenly_measured(spec, running.tracking_uri):  # interrupted before its evaluation
        wait = evaluate_like_the_rest(spec, running)
    if pending is not None and out["failed"] == 0:
        (saved.storage_root(running.storage) / spec.name / TARGET_FILE).unlink(missing_ok=True)
    return spec, out, wait


def _look(rep, sweep, spec, block_s: float | None, watch: _Watch, settings: AugmentSettings) -> str:
    """One look: its verdicts counted, recorded on the parent (when new) and said; returns
    why to stop, or ""."""
    from analysis.publish import log_to_parent, record_look

    counts = rep.decision.counts()
    step = _step(watch.plan, spec.replicates)
    stop = _stop_reason(rep.decision.undecided(), spec.replicates, watch.plan.max_replicates, settings.budget_minutes,
                        watch.started, None if block_s is None else block_s * step,
                        counts.get("matters, size unsure", 0))
    more = "add one replicate block" if step == 1 else f"add {step} replicate blocks (the plan looks every {step})"
    look = Look(spec.replicates, rep.look.alpha, counts, stop or more, rep.look.label())
    watch.looks.append(look)
    if rep.look.new or rep.look.sealed:
        record_look(sweep, watch.uri, rep.look.plan.to_json(), json.dumps({**look.__dict__}), rep.look.index)
        log_to_parent(rep, sweep, watch.uri)  # the parent's description is this look's answer (and a screening's link)
    _keep_on_parent(watch.client, watch.parent, spec.name, "look", {},
                    {"augment/undecided": rep.decision.undecided()}, rep.look.index)
    watch.client.log_metric(watch.parent, "augment/undecided", rep.decision.undecided(), step=rep.look.index)
    settings.say(f"{spec.name}: {look.text()}")
    return stop


def _keep_on_parent(client, parent: str, name: str, kind: str, tags: dict, metrics: dict | None = None,
                    step: int = 0) -> None:
    """What is about to be written to the parent, kept in the sweep's storage first
    (`trials.store.kept`), so that `trials recover` rebuilds it."""
    exp_dir = sweep_storage(client.get_run(parent).data.tags, name)
    if exp_dir is not None:
        keep_parent_record(exp_dir, kind, tags, metrics, step)


def _failed(out: dict, looks: list, spec) -> dict:
    return {"looks": looks, "stopped": f"stop: {out['failed']} trial(s) failed; fix and rerun augment",
            "replicates": spec.replicates, "ok": False}


def _step(plan, replicates: int) -> int:
    """The blocks to add before the next look: the plan's `look_every` (one where it names
    none), never past its maximum."""
    return max(1, min(plan.look_every or 1, plan.max_replicates - replicates))


def _add_block(spec, running: RunSettings, step: int = 1):
    """`step` more replicate blocks, saved with the sweep and run as one, evaluated and timed
    like the rest; returns (spec, run's result, seconds, why a look must wait or "")."""
    from . import runner

    spec = expand.with_replicates(spec, spec.replicates + step)
    t0 = time.monotonic()
    out = runner.run(spec, running)
    wait = evaluate_like_the_rest(spec, running) if not out["failed"] else ""
    return spec, out, time.monotonic() - t0, wait


def _plan(tags: dict, replicates: int, max_replicates: int | None, alpha: float, post_hoc: bool,
          look_every: int | None = None):
    """The sweep's plan (from its parent run), or one fixed now: before the first look a plan
    made here counts as declared; after one it is post hoc, refused unless `post_hoc`. A
    `look_every` given here fills a plan that names none (when the looks fall depends on no
    result); it cannot change one that does."""
    plan = _recorded_plan(tags, replicates, max_replicates, alpha, post_hoc)
    if look_every is not None and plan.look_every not in (None, look_every):
        raise ValueError(f"--look-every: this sweep's plan looks every {plan.look_every} blocks; it cannot change")
    plan.look_every = plan.look_every or look_every
    return plan


def _recorded_plan(tags: dict, replicates: int, max_replicates: int | None, alpha: float, post_hoc: bool):
    from analysis.sequential import Plan, plan_of

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
    from analysis.plan import median_minutes

    minutes = median_minutes(df, "run_s")
    return None if minutes is None else 60.0 * minutes * sum(1 for t in spec.trials if t.replicate == 0)


def _report(sweep):
    """The analysis of the primary responses at this data: a look of the sweep's plan."""
    from analysis.report import build_report

    return build_report(sweep, None, responses=list(sweep.record.responses))


def _stop_reason(undecided: int, replicates: int, max_replicates: int, budget_minutes: float | None,
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
