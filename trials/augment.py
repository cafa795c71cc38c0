"""`trials augment NAME`: more replicate blocks for a sweep in storage, or look after look
until every primary term is decided.

- `--replicates N` adds N blocks (new seeds, each block in its own randomised order, the
  shared target reused) and runs them.
- `--until-decided` repeats looks: the statistics analyse the runs (each analysis a look of
  the sweep's sequential plan), stop when every term of the family is decided, at the plan's
  maximum of blocks, or when the next block would pass `--budget-minutes`; otherwise they add
  the plan's blocks with this module's `add_block` and look again. The looks are the
  statistics' (`analysis.until_decided`, reached through the entry point group
  `dspark_sweeps.deciders`): the engine imports no statistics. Each look tests at the alpha
  the plan's spending rule gives it on the information scale, so repeated looks do not
  inflate false verdicts.

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
from importlib.metadata import entry_points
from typing import Any

from trials.store.kept import keep_parent_record, sweep_storage

from . import expand, saved
from trials.timing.block_evaluation import evaluate_like_the_rest, unevenly_measured
from trials.store.kept import write_atomic
from .run_settings import RunSettings


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
    return _decider()(spec, running, settings, pending)


DECIDERS = "dspark_sweeps.deciders"  # the entry point group of what decides a sweep's looks (pyproject)


def _decider() -> Callable[..., dict]:
    """What looks until decided (`--until-decided`): the installed statistics' entry point of
    the group `dspark_sweeps.deciders` (`analysis.until_decided.until_decided`), so that the
    engine imports no statistics; one line where none is installed."""
    found = list(entry_points(group=DECIDERS))
    if not found:
        raise ValueError(f"augment --until-decided: nothing installed decides a sweep's looks (no entry point in "
                         f"{DECIDERS}; `make install` installs the analysis package's)")
    return found[0].load()


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


def finish_first(spec, running: RunSettings, pending: dict | None, say):
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


def keep_on_parent(client, parent: str, name: str, kind: str, tags: dict, metrics: dict | None = None,
                    step: int = 0) -> None:
    """What is about to be written to the parent, kept in the sweep's storage first
    (`trials.store.kept`), so that `trials recover` rebuilds it."""
    exp_dir = sweep_storage(client.get_run(parent).data.tags, name)
    if exp_dir is not None:
        keep_parent_record(exp_dir, kind, tags, metrics, step)


def failed(out: dict, looks: list, spec) -> dict:
    return {"looks": looks, "stopped": f"stop: {out['failed']} trial(s) failed; fix and rerun augment",
            "replicates": spec.replicates, "ok": False}


def blocks_before_look(plan, replicates: int) -> int:
    """The blocks to add before the next look: the plan's `look_every` (one where it names
    none), never past its maximum."""
    return max(1, min(plan.look_every or 1, plan.max_replicates - replicates))


def add_block(spec, running: RunSettings, step: int = 1):
    """`step` more replicate blocks, saved with the sweep and run as one, evaluated and timed
    like the rest; returns (spec, run's result, seconds, why a look must wait or "")."""
    from . import runner

    spec = expand.with_replicates(spec, spec.replicates + step)
    t0 = time.monotonic()
    out = runner.run(spec, running)
    wait = evaluate_like_the_rest(spec, running) if not out["failed"] else ""
    return spec, out, time.monotonic() - t0, wait


