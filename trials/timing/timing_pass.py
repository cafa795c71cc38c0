"""`trials time NAME`: the interleaved timing pass, which measures a sweep's timed responses
(a workload's wall-clock rows: `timed` in its registry).

Inside a sweep each trial times itself beside whatever else the machine runs (two trials at
a time, the driver, other users), so every run carries a timing error common to the whole
run that no number of prompts reduces, and the analysis books it as seed noise. Here every
FINISHED trial is timed in one process on one node (one Ray task, so on a cluster every arm
is timed on the same hardware), round-robin: R rounds, in each every run once, in a fresh
random order seeded by (--seed, round), each run's timed repetition after W untimed
warm-ups (one prompt or one step each: enough to bring the run's weights into cache). A load that lasts a round slows every arm of that
round alike, so it cancels in the contrasts; the random orders keep a drift within a round
from siding with one arm.

What a repetition is, and how the timed response follows from the raw times, is the
workload's (`Workload.timing`; DSpark's is `dspark.timed`: a decoding speed-up timed over P
prompts both ways, or S training steps).

Each run is timed once: a pass times the blocks that hold a run no pass has timed, every arm
of such a block in the same pass (so the load a block met is common to its arms and the
block's effect in the model absorbs it), and keeps every earlier pass's values; a look whose
timed values did not change spends nothing on them (`analysis.sequential`). `--again` times
every finished run again (a pass spoiled by load).

Records, written only once every round is done: each trial's run gets its value as a new
step after its last one (as `trials reeval` logs), with `timing/rounds` and
`timing/prompts` or `timing/steps`, and the tag `timing.pass` = the pass id (a timestamp);
the sweep's parent run gets the tag `timing` (JSON: id, settings, node, started, seconds,
response, and `busy`: how many (run, round)s depart from their run's median round by more
than BUSY_ROUND, each named in the record, the worst in the warning the pass then ends on) and
the artifact `timing/pass.json` (every raw time of every round and run, and the orders).
Another pass replaces the values: a new step, a new id. Each pass is kept in
storage first (`trials.store.kept`), so that `trials recover` rebuilds it with the sweep.

Refused before Ray starts, with one line: an unknown sweep, a sweep with no finished trial
or with trials of both stages, a finished drafter-stage trial without a checkpoint, a gone
shared target, and settings out of range.
"""

from __future__ import annotations

import json
import math
import random
import signal
import socket
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from trials.driver.identity import check_same_sweep
from trials.driver.ledger import keep_parent_registry
from trials.lease import Lease
from trials.store.client import tracking_client
from trials.store.items import encode_each
from trials.store.kept import keep_parent_record, keep_run_record
from trials.store.keys import PARENT_TAG, PASS_TAG, SUMMARY_TAG, sweep_parent
from trials.store.runs import log_metrics

from .timing_settings import TimingSettings, again_command

# A run's value in one round that departs from its median round by more than this share: a load
# during that round, or a repetition too short to time steadily (of head-and-block's three passes,
# 4 prompts a repetition, the two quiet ones departed by at most 0.28, the one beside the test
# suite by up to 10.3, in 11 run-rounds; seed-questions' last pass, 1 step a repetition: 20 of
# 1,700 run-rounds, the worst 2.2x its run's median)
BUSY_ROUND = 0.5
ARTIFACT_DIR = "timing"
PASS_FILE = "pass.json"  # the parent's artifact timing/pass.json: every raw time and the orders


def round_order(keys: list[str], seed: int, k: int) -> list[str]:
    """Round k's order of the runs: a permutation seeded by (seed, k), so the same pass
    gives the same orders and every round draws its own."""
    order = list(keys)
    random.Random(f"trials-time:{seed}:{k}").shuffle(order)  # a str seed hashes the same in every process
    return order


def schedule(keys: list[str], rounds: int, warmup: int, seed: int) -> list[tuple[int, str, bool]]:
    """Every repetition of the pass in the order it runs: (round, trial key, timed). In each
    round every run once, in `round_order`, its `warmup` untimed repetitions just before its
    timed one."""
    return [(k, key, i == warmup) for k in range(rounds) for key in round_order(keys, seed, k)
            for i in range(warmup + 1)]


# ---------------------------------------------------------------- in the Ray task

def timing_task(wl, stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: dict):
    """The whole pass in one Ray worker (one node), with the worker's CPUs as torch's
    threads: `pass_rounds`. Made a Ray task only by the driver, so this module loads without
    Ray (the CLI reads its defaults, and a refused pass never imports it)."""
    import ray

    threads = max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))
    yield from pass_rounds(wl, stage, configs, checkpoints, settings, threads)


def pass_rounds(wl, stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: dict,
                threads: int):
    """The pass in this process: yields {"node", "threads", "load_s"} once the runs are
    loaded, then per round {"round", "order", "times": key -> raw seconds}. The Ray task and
    the Ray-free local runner (`trials run --local`) both run it."""
    import torch

    s = TimingSettings(**settings)
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"{wl.name}-time-") as tmp:
        arms = wl.timing.arms(stage, configs, checkpoints, s, tmp)
        yield {"node": socket.gethostname(), "threads": torch.get_num_threads(), "load_s": time.perf_counter() - t0}
        order, times = [], {}
        events = schedule(list(configs), s.rounds, s.warmup, s.seed)
        for i, (k, key, timed) in enumerate(events):
            raw = arms.run(key, whole=timed)
            if timed:
                order.append(key)
                times[key] = raw
            if i + 1 == len(events) or events[i + 1][0] != k:
                yield {"round": k, "order": order, "times": times}
                order, times = [], {}


# ---------------------------------------------------------------- the driver

def sweep_stage(spec) -> str:
    """The one variant (DSpark: parallel stage) of the sweep's trials; refused when it mixes several."""
    stages = sorted({spec.wl.variant(t.config) for t in spec.trials})
    if len(stages) != 1:
        raise ValueError(f"time: sweep {spec.name!r} has trials of both stages ({', '.join(stages)}); "
                         "a pass times one response")
    return stages[0]


def untimed_blocks(finished: list, runs: dict) -> list:
    """The finished trials of every block that holds a run no timing pass has timed: each
    run is timed once, every arm of a block in one pass."""
    blocks = {t.replicate for t in finished if PASS_TAG not in runs[t.key].data.tags}
    return [t for t in finished if t.replicate in blocks]


def time_sweep(name: str, storage: str | None, tracking_uri: str | None = None, address: str | None = None,
               settings: TimingSettings = TimingSettings(), say=print, again: bool = False) -> dict | None:
    """Time the finished trials of every block with a run not timed yet (all where `again`;
    the module's docstring); returns the pass record, or None where every run is timed."""
    from trials.reeval import bind_existing_targets, check_checkpoints, finished_trials
    from trials.saved import load_saved, storage_root

    if not isinstance(settings, TimingSettings):
        raise ValueError(f"time: settings must be TimingSettings, got {type(settings).__name__}")
    spec, meta = load_saved(name, storage, "time")
    uri = tracking_uri or meta["tracking_uri"]
    stage = sweep_stage(spec)
    root = storage_root(storage)
    check_same_sweep(spec, uri, root, "time")
    client = tracking_client(uri)
    hooks = spec.wl.timing
    if hooks is None:
        raise ValueError(f"time: workload {spec.workload!r} has no timing pass")
    runs, finished, checkpoints = finished_trials(client, spec, root, uri, "time",
                                                  checkpoints=hooks.needs_checkpoints(stage))
    if not finished:
        raise ValueError(f"time: sweep {name!r} has no finished trial to time (in {uri})")
    if not again:
        finished = untimed_blocks(finished, runs)
        if not finished:
            say(f"{name}: every finished run is timed already, each once; nothing to time (trials time {name} "
                "--again times them all again)")
            return None
    bound = bind_existing_targets(spec, root, "time")
    size = getattr(settings, hooks.size[stage])
    with Lease(root / name, name, f"trials time {name}"):
        from trials.driver import cluster  # Ray: only once the pass's inputs are checked

        check_checkpoints(checkpoints, bound, spec.wl, "time")  # before Ray starts, and before anything is said
        say(f"{name}: timing {len(finished)} run(s) ({hooks.response[stage]}): {settings.rounds} rounds, "
            f"{settings.warmup} warm-up(s) each, {size} {hooks.size[stage]} a repetition")

        before = signal.getsignal(signal.SIGTERM)  # Ray's init sets its own: restored past the pass
        started = cluster.init_ray(address)
        record = _on_ray(started, before, lambda: _drive(spec, stage, {t.key: bound[t.key].to_dict()
                                                                         for t in finished}, checkpoints, settings, say))
        record["runs"] = {t.key: t.run_name for t in finished}
        check_pass(record, hooks.response[stage], name)
        with held_sigterm():  # recorded whole: a SIGTERM now stops the command once it is
            log_pass(client, {t.key: runs[t.key] for t in finished}, record, root / name)
            keep_parent_registry(client, runs[finished[0].key].data.tags[PARENT_TAG], spec.wl.registry,
                                 pass_names(record))
    if record["busy"]:
        say(busy_warning(name, record))
    return record


def busy_warning(name: str, record: dict) -> str:
    """The line a pass with busy rounds ends on (`busy_rounds`), naming the worst."""
    first = record["busy"][0]
    return (f"{name}: warning: {len(record['busy'])} run-round(s) of this pass depart from their run's median round "
            f"by more than {BUSY_ROUND:.0%} (worst: {record['runs'][first['run']]} in round {first['round'] + 1}, "
            f"{first['value']:.3g} against {first['median']:.3g}): a load during the pass, or repetitions too short "
            f"to time steadily (more --prompts or --steps); the values skew every look that reads them; time it "
            f"again on a quiet machine: {again_command(name, record)}")


def _on_ray(started: bool, before, work):
    """`work()` on the Ray just joined, a SIGTERM stopping it as a Ctrl-C would; the Ray shut
    down after where this pass started it, and the SIGTERM handler from `before` Ray's init
    put back (Ray's own, sys.exit(15), would end the command with no line)."""
    ours = stop_on_sigterm()  # after ray.init, which sets its own (sys.exit(15): exit 1 and a stack dump)
    try:
        return work()
    finally:
        if started:
            import ray

            ray.shutdown()
        if ours is not None and before is not None:
            signal.signal(signal.SIGTERM, before)


class held_sigterm:
    """A SIGTERM while the block runs is held until it ends, then raised as `Terminated` with
    `recorded` set: what the block writes is written whole. Off the main thread: nothing held."""

    def __enter__(self):
        self.got: list[int] = []
        try:
            self.previous = signal.signal(signal.SIGTERM, lambda signum, frame: self.got.append(signum))
        except ValueError:
            self.previous = None
        return self

    def __exit__(self, kind, value, tb):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        if self.got and kind is None:
            SIGTERMED.extend(self.got)
            raise Terminated(recorded=True)
        return False


class Terminated(KeyboardInterrupt):
    """A SIGTERM during the pass: stopped like a Ctrl-C, exit 143; nothing of the pass is
    recorded, unless `recorded` (it came while the pass was being written, which finished)."""

    def __init__(self, *args, recorded: bool = False):
        super().__init__(*args)
        self.recorded = recorded


SIGTERMED: list[int] = []  # the SIGTERMs received: Ray may hand the interrupt on as a plain KeyboardInterrupt


def stop_on_sigterm():
    """SIGTERM raises `Terminated` in the main thread; returns the handler it replaced (None
    off the main thread, where signals cannot be set)."""
    def stop(signum, frame):
        SIGTERMED.append(signum)
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, stop)
    except ValueError:
        return None


def check_pass(record: dict, response: str, name: str) -> None:
    """A pass whose values are not all finite and > 0 (a time, or a ratio of times) records
    nothing: it is one interleaved measurement, so none of it is kept; says which runs."""
    bad = [f"{record['runs'].get(k, k)} ({v!r})" for k, v in record["values"].items()
           if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        raise ValueError(f"time: the pass measured no usable {response} (finite and > 0) for {len(bad)} run(s), "
                         f"{', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}; nothing is recorded: run "
                         f"`trials time {name}` again")


def busy_rounds(hooks, stage: str, rounds: list[dict]) -> list[dict]:
    """The (run, round)s whose value, computed from that round alone by the workload's
    `values`, departs from the run's median round by more than BUSY_ROUND of it: a load
    that lasted part of a round (another process, a niced test suite) and slowed one arm's
    repetition more than the other's, which the sums over rounds would carry into the value."""
    per_round = [hooks.values(stage, [r]) for r in rounds]
    out = []
    for key in per_round[0] if len(rounds) >= 3 else ():
        values = [p[key] for p in per_round]
        median = statistics.median(values)
        out += [{"run": key, "round": i, "value": v, "median": median} for i, v in enumerate(values)
                if median > 0 and abs(v / median - 1) > BUSY_ROUND]
    return sorted(out, key=lambda b: -abs(b["value"] / b["median"] - 1))


def _drive(spec, stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: TimingSettings,
           say) -> dict:
    """Run the pass's task, saying one line per round; the pass's record."""
    import ray

    from trials.driver.progress import clock

    pass_id, started, t0 = _pass_id(), time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter()
    res = {"num_cpus": spec.resources.get("cpu", 1), "num_gpus": spec.resources.get("gpu", 0)}
    stream = ray.remote(max_retries=0)(timing_task).options(**res).remote(spec.wl, stage, configs, checkpoints,
                                                                           asdict(settings))
    head, rounds, first = None, [], None
    for ref in stream:
        item = ray.get(ref)
        if head is None:
            head, first = item, time.perf_counter()
            say(f"{spec.name}: {len(configs)} run(s) loaded on {item['node']} in {clock(item['load_s'])} "
                f"({item['threads']} thread(s))")
            continue
        rounds.append(item)
        k, done = item["round"] + 1, time.perf_counter()
        left = (done - first) / k * (settings.rounds - k)
        say(f"{spec.name}: round {k}/{settings.rounds} timed, {clock(done - t0)} elapsed, ~{clock(left)} left")
    hooks = spec.wl.timing
    size = hooks.size[stage]
    return {"id": pass_id, "rounds": settings.rounds, "warmup": settings.warmup, size: getattr(settings, size),
            "seed": settings.seed, "node": head["node"], "threads": head["threads"], "started": started,
            "seconds": round(time.perf_counter() - t0, 3), "response": hooks.response[stage], "stage": stage, "repetition": size,
            "orders": [r["order"] for r in rounds], "times": [r["times"] for r in rounds],
            "values": hooks.values(stage, rounds), "jack": encode_each(hooks.items(stage, rounds)),
            "busy": busy_rounds(hooks, stage, rounds)}


def _pass_id() -> str:
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def pass_names(record: dict) -> list[str]:
    """The names a pass writes to its runs: the timed response, its counts and its items."""
    size = record["repetition"]
    return [record["response"], "timing/rounds", f"timing/{size}",
            *{k for jack in record.get("jack", {}).values() for k in jack}]


def log_pass(client, runs: dict, record: dict, exp_dir: Path | None = None) -> None:
    """The pass's values to each run (a new step after its last one, then the tag), and
    last the pass itself to the sweep's parent run (tag and artifact). Kept in storage
    first (`trials.store.kept`, in `exp_dir`), so that `trials recover` rebuilds it."""
    from trials.reeval import next_step

    size = record["repetition"]
    steps = {key: next_step(client, run) for key, run in runs.items()}
    per_run = {key: {record["response"]: record["values"][key], "timing/rounds": record["rounds"],
                     f"timing/{size}": record[size], **record.get("jack", {}).get(key, {})} for key in runs}
    summary = json.dumps({**{k: record[k] for k in ("id", "rounds", "warmup", size, "seed", "node", "started",
                                                    "seconds", "response")}, "busy": len(record.get("busy", ()))})
    raw = json.dumps(record, indent=1).encode()
    if exp_dir is not None:
        for key in runs:
            keep_run_record(exp_dir, key, "timing", steps[key], per_run[key], {PASS_TAG: record["id"]})
        keep_parent_record(exp_dir, "timing", {SUMMARY_TAG: summary}, artifacts={f"{ARTIFACT_DIR}/{PASS_FILE}": raw})
    for key, run in runs.items():
        log_metrics(client, run.info.run_id, per_run[key], steps[key])
        client.set_tag(run.info.run_id, PASS_TAG, record["id"])
    parent = sweep_parent(client, next(iter(runs.values())).info.experiment_id)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / PASS_FILE
        path.write_bytes(raw)
        client.log_artifact(parent.info.run_id, str(path), artifact_path=ARTIFACT_DIR)
    client.set_tag(parent.info.run_id, SUMMARY_TAG, summary)
