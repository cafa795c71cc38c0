"""A sweep's new replicate block evaluated and timed like its other blocks: re-evaluated with
the counts `trials reeval` gave the rest, timed with the settings of the last timing pass,
so that every run of a look is measured alike (`trials augment`)."""

from __future__ import annotations

import json
from dataclasses import asdict

from trials.store.client import tracking_client
from trials.store.keys import PASS_TAG, SUMMARY_TAG, reeval_tag, sweep_parent, sweep_trials

from trials.run_settings import RunSettings
from .timing_pass import time_sweep
from .timing_settings import TimingSettings, again_command


def unevenly_measured(spec, uri: str) -> bool:
    """Whether the sweep's finished runs differ in their re-evaluation counts or lack the
    last timing pass (or any, where a timed response is primary): what an augment interrupted
    between a block's trials and its evaluation leaves, or a sweep whose timed primary
    response `trials run` did not time (a confirmation of step time)."""
    client = tracking_client(uri)
    exp = client.get_experiment_by_name(spec.name)
    parent = sweep_parent(client, exp.experiment_id) if exp else None
    runs = [r for r in sweep_trials(client, exp.experiment_id) if r.info.status == "FINISHED"] if exp else []
    if not runs:
        return False
    uneven = any(len({r.data.tags.get(reeval_tag(f)) for r in runs}) > 1 for f in spec.wl.reeval_counts)
    timed = parent is not None and SUMMARY_TAG in parent.data.tags or bool(timed_primary(spec))
    return uneven or (timed and any(PASS_TAG not in r.data.tags for r in runs))


def evaluate_like_the_rest(spec, running: RunSettings) -> str:
    """A sweep re-evaluated with more items (`trials reeval`; DSpark: prompts, held-out
    batches): a new block's trials get the same evaluation, so that every run of a look is
    evaluated with the same counts (the spec's own counts would mix two evaluations in one
    analysis); and timed like the rest (`time_like_the_rest`, whose "" or reason to wait it
    returns)."""
    from trials.reeval import reeval

    client = tracking_client(running.tracking_uri)
    exp = client.get_experiment_by_name(spec.name)
    runs = sweep_trials(client, exp.experiment_id)
    asked = {}
    for field in spec.wl.reeval_counts:
        counts = {r.data.tags[reeval_tag(field)] for r in runs if reeval_tag(field) in r.data.tags}
        if len(counts) == 1:
            asked[field] = int(counts.pop())
    if asked:
        reeval(spec.name, running.storage, asked, tracking_uri=running.tracking_uri, address=running.address)
    return time_like_the_rest(spec, client, exp.experiment_id, running)


BUSY_PASSES = 3  # timing passes an augment takes before a look, at most, to get one the busy check passes


def timed_primary(spec) -> list[str]:
    """The sweep's primary responses its workload times in a timing pass."""
    rows = spec.wl.registry
    return [r for r in spec.responses if rows.is_timed(r)]


def time_like_the_rest(spec, client, experiment_id: str, running: RunSettings, say=print) -> str:
    """A sweep whose timed responses came from a timing pass gets its new block timed with the
    same settings: each run is timed once, every arm of the block interleaved in one pass, so
    the load the block met is common to its arms (the block's effect absorbs the rest). A
    sweep with a timed primary response that no pass has timed yet (a confirmation of step
    time) is timed here, with its spec's `timing:` settings (the screening's, where `analysis
    plan --confirm` wrote it). A pass the busy check flags is taken again, every run, up to
    BUSY_PASSES passes: a binding look never rests on a pass the tool itself calls busy.
    Returns "" once the timed values are fit for a look, else why not (a look waits)."""
    parent = sweep_parent(client, experiment_id)
    last = json.loads(parent.data.tags[SUMMARY_TAG]) if parent is not None and SUMMARY_TAG in parent.data.tags else None
    if not last and not timed_primary(spec):
        return ""
    known = TimingSettings.__dataclass_fields__
    given = {k: last[k] for k in known if k in last} if last else dict(spec.timing)
    settings = TimingSettings(**given)
    record = time_sweep(spec.name, running.storage, running.tracking_uri, running.address, settings, say=say)
    if record is None:  # nothing new to time: the last pass stands
        record = last or {}
    for _ in range(BUSY_PASSES - 1):
        if not record.get("busy"):
            return ""
        say(f"{spec.name}: the timing pass was busy: timing every run again before the look")
        record = time_sweep(spec.name, running.storage, running.tracking_uri, running.address, settings,
                            say=say, again=True) or {}
    if record.get("busy"):
        return (f"{BUSY_PASSES} timing passes in a row were busy: time it again on a quiet machine "
                f"({again_command(spec.name, asdict(settings))}), then: trials augment {spec.name} --until-decided")
    return ""
