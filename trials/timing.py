"""`trials time NAME`: the interleaved timing pass, which measures a sweep's timed responses
(`spec/speedup` in a drafter-stage sweep, `train/step_ms` in a backbone-stage one).

Inside a sweep each trial times itself beside whatever else the machine runs (two trials at
a time, the driver, other users), so every run carries a timing error common to the whole
run that no number of prompts reduces, and the analysis books it as seed noise. Here every
FINISHED trial is timed in one process on one node (one Ray task, so on a cluster every arm
is timed on the same hardware), round-robin: R rounds, in each every run once, in a fresh
random order seeded by (--seed, round), each run's timed repetition after W untimed
warm-ups (one prompt or one step each: enough to bring the run's weights into cache). A load that lasts a round slows every arm of that
round alike, so it cancels in the contrasts; the random orders keep a drift within a round
from siding with one arm.

Drafter stage: each run's final checkpoint is loaded once (`Trainer.load_checkpoint`, the
shared target from storage, `weights_only=True`), and a repetition decodes the same P held-out
prompts both ways (autoregressive, then speculative, prompt by prompt, the evaluation's fixed
decoding seeds, temperature 1, the run's `spec_new_tokens`); `spec/speedup` = (AR seconds
summed over rounds), with its delete-a-group jackknife over the timing prompts
(`jack/spec/speedup@g<k>`: a run's speedup also moves with how its drafter fares on the
prompts decoded, which more prompts average out and more rounds do not). Backbone stage: the step is
a property of the configuration, not of the learned weights, so each run's Trainer is built
from its config (its seed) and a repetition is S training steps (`Trainer.step`) on the same
S batches; `train/step_ms` = mean ms per step over all rounds.

Records, written only once every round is done: each trial's run gets its value as a new
step after its last one (as `trials reeval` logs), with `timing/rounds` and
`timing/prompts` or `timing/steps`, and the tag `timing.pass` = the pass id (a timestamp);
the sweep's parent run gets the tag `timing` (JSON: id, settings, node, started, seconds,
response) and the artifact `timing/pass.json` (every raw time of every round and run, and
the orders). Another pass replaces the values: a new step, a new id. Each pass is kept in
storage first (`dspark.kept`), so that `trials recover` rebuilds it with the sweep.

Refused before Ray starts, with one line: an unknown sweep, a sweep with no finished trial
or with trials of both stages, a finished drafter-stage trial without a checkpoint, a gone
shared target, and settings out of range.
"""

from __future__ import annotations

import json
import random
import socket
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PASS_TAG = "timing.pass"  # on each timed trial's run: the id of the pass behind its values
SUMMARY_TAG = "timing"  # on the sweep's parent run: the last pass, as JSON
ARTIFACT_DIR = "timing"
PASS_FILE = "pass.json"  # the parent's artifact timing/pass.json: every raw time and the orders
RESPONSE = {"drafter": "spec/speedup", "backbone": "train/step_ms"}
SIZE = {"drafter": "prompts", "backbone": "steps"}  # what one repetition holds, per stage


@dataclass(frozen=True)
class TimingSettings:
    """The pass's knobs (the CLI's flags of the same names)."""
    rounds: int = 5  # R: every run once per round, each round in a fresh random order
    warmup: int = 1  # W: untimed repetitions of a run before its timed one, every round
    prompts: int = 8  # P: prompts a drafter-stage repetition decodes both ways
    steps: int = 20  # S: training steps a backbone-stage repetition times
    seed: int = 0  # seeds the rounds' orders (with the round) and the backbone's batches

    def __post_init__(self):
        for name, least in (("rounds", 2), ("warmup", 0), ("prompts", 1), ("steps", 1), ("seed", None)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or (least is not None and v < least):
                raise ValueError(f"--{name}: an integer{f' >= {least}' if least is not None else ''}, got {v!r}")


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

class Corpora:
    """One corpus per distinct data setting, shared by the runs' trainers (each would read
    and hash it again)."""

    def __init__(self):
        self.found: dict = {}

    def trainer(self, cfg):
        from dspark.train import Trainer

        key = (cfg.data, cfg.text_column, cfg.seq_len, cfg.max_corpus_bytes)  # what build_corpus reads
        trainer = Trainer(cfg, corpus=self.found.get(key))
        self.found[key] = trainer.corpus
        return trainer


class DecodeArms:
    """Drafter stage: each run's final drafter and head with its (shared) target, decoding
    the same P prompts autoregressively and speculatively."""

    def __init__(self, configs: dict[str, dict], checkpoints: dict[str, str], settings: TimingSettings, tmp: str):
        from dspark.config import from_dict
        from dspark.speculative_eval import prompts_from

        corpora, targets, self.arms = Corpora(), {}, {}
        for key, config in configs.items():
            trainer = corpora.trainer(from_dict({**config, "out_dir": tmp}))
            trainer.load_checkpoint(checkpoints[key])
            if trainer.stage != "done":
                raise ValueError(f"time: {checkpoints[key]} is not a finished trial's checkpoint "
                                 f"(stage {trainer.stage})")
            cfg = trainer.cfg
            target = targets.setdefault(cfg.target_path, trainer.target)  # one copy of a shared target
            for m in (target, trainer.drafter, trainer.head):
                m.eval()
            prompts = [p.to(trainer.device) for p in prompts_from(trainer.corpus.val, settings.prompts,
                                                                  cfg.spec_prompt_len)]
            self.arms[key] = (target, trainer.drafter, trainer.head, prompts, cfg.spec_new_tokens, trainer.device)

    def run(self, key: str, whole: bool = True) -> dict[str, list[float]]:
        """One repetition: per prompt, the AR and the speculative seconds (a warm-up, not
        `whole`: the first prompt alone, enough to bring this run's weights into cache)."""
        from dspark.speculative_eval import decode_set

        target, drafter, head, prompts, new_tokens, device = self.arms[key]
        prompts = prompts if whole else prompts[:1]
        _, _, spec_s, ar_s = decode_set(target, drafter, head, prompts, new_tokens, 1.0, device, n_timed=len(prompts))
        return {"ar_s": ar_s, "spec_s": spec_s}


class StepArms:
    """Backbone stage: a Trainer per run built from its config (its seed: the step is the
    configuration's, not the learned weights'), stepping on the same S batches."""

    def __init__(self, configs: dict[str, dict], settings: TimingSettings, tmp: str):
        import torch

        from dspark.config import from_dict
        from dspark.data import sample_batch

        corpora, self.arms = Corpora(), {}
        for key, config in configs.items():
            trainer = corpora.trainer(from_dict({**config, "out_dir": tmp}))
            cfg, gen = trainer.cfg, torch.Generator().manual_seed(settings.seed)
            batches = [sample_batch(trainer.corpus.train, cfg.batch_size, cfg.seq_len + 1, gen).to(trainer.device)
                       for _ in range(settings.steps)]  # each (B, T + 1)
            self.arms[key] = (trainer, [(x, trainer.anchors(x.shape[0]).to(trainer.device)) for x in batches])

    def run(self, key: str, whole: bool = True) -> dict[str, list[float]]:
        """One repetition: the seconds of each of the S steps (each ends synchronised; a
        warm-up, not `whole`: one step)."""
        trainer, batches = self.arms[key]
        batches = batches if whole else batches[:1]
        out = []
        for x, anchors in batches:
            t0 = time.perf_counter()
            trainer.step(x, anchors)
            out.append(time.perf_counter() - t0)
        return {"step_s": out}


def timing_task(stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: dict):
    """The whole pass in one Ray worker (one node), with the worker's CPUs as torch's
    threads: `pass_rounds`. Made a Ray task only by the driver, so this module loads without
    Ray (the CLI reads its defaults, and a refused pass never imports it)."""
    import ray

    threads = max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))
    yield from pass_rounds(stage, configs, checkpoints, settings, threads)


def pass_rounds(stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: dict, threads: int):
    """The pass in this process: yields {"node", "threads", "load_s"} once the runs are
    loaded, then per round {"round", "order", "times": key -> raw seconds}. The Ray task and
    the Ray-free local runner (`trials run --local`) both run it."""
    import torch

    s = TimingSettings(**settings)
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dspark-time-") as tmp:
        arms = DecodeArms(configs, checkpoints, s, tmp) if stage == "drafter" else StepArms(configs, s, tmp)
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

def jack_values(stage: str, rounds: list[dict]) -> dict[str, dict[str, float]]:
    """Drafter stage: each run's spec/speedup recomputed without each group of timing
    prompts (prompt i in group i mod G, G = jack_groups(P)), as `jack/spec/speedup@g<k>`:
    a run's speedup also varies with how its drafter fares on the prompts the pass decodes
    (the decoding seeds fix that part), so the analysis splits it off like any evaluation's.
    Backbone stage: none."""
    from dspark.metrics import jack_groups, jack_name

    if stage != "drafter":
        return {}
    out = {}
    for k in rounds[0]["times"]:
        ar = [sum(r["times"][k]["ar_s"][i] for r in rounds) for i in range(len(rounds[0]["times"][k]["ar_s"]))]
        spec = [sum(r["times"][k]["spec_s"][i] for r in rounds) for i in range(len(ar))]
        G = jack_groups(len(ar))
        out[k] = {jack_name(RESPONSE[stage], g): sum(a for i, a in enumerate(ar) if i % G != g)
                  / sum(b for i, b in enumerate(spec) if i % G != g) for g in range(G if G >= 2 else 0)}
    return out


def values(stage: str, rounds: list[dict]) -> dict[str, float]:
    """Each run's timed response from the rounds' raw times: spec/speedup = AR seconds /
    speculative seconds, each summed over rounds and prompts; train/step_ms = mean ms per step."""
    keys = rounds[0]["times"]
    if stage == "drafter":
        return {k: sum(sum(r["times"][k]["ar_s"]) for r in rounds) / sum(sum(r["times"][k]["spec_s"]) for r in rounds)
                for k in keys}
    return {k: 1000.0 * sum(sum(r["times"][k]["step_s"]) for r in rounds)
            / sum(len(r["times"][k]["step_s"]) for r in rounds) for k in keys}


def sweep_stage(spec) -> str:
    """The one stage of the sweep's trials; refused when it mixes both."""
    stages = sorted({t.config.parallel_stage for t in spec.trials})
    if len(stages) != 1:
        raise ValueError(f"time: sweep {spec.name!r} has trials of both stages ({', '.join(stages)}); "
                         "a pass times one response")
    return stages[0]


def time_sweep(name: str, storage: str | None, tracking_uri: str | None = None, address: str | None = None,
               settings: TimingSettings = TimingSettings(), say=print) -> dict:
    """Time every finished trial of a sweep (see the module's docstring); returns the pass
    record (what `timing/pass.json` holds)."""
    from dspark.record import tracking_client

    from .identity import check_same_sweep
    from .lease import Lease
    from .reeval import bind_existing_targets, check_checkpoints, finished_trials
    from .saved import load_saved, storage_root

    if not isinstance(settings, TimingSettings):
        raise ValueError(f"time: settings must be TimingSettings, got {type(settings).__name__}")
    spec, meta = load_saved(name, storage, "time")
    uri = tracking_uri or meta["tracking_uri"]
    stage = sweep_stage(spec)
    root = storage_root(storage)
    check_same_sweep(spec, uri, root, "time")
    client = tracking_client(uri)
    runs, finished, checkpoints = finished_trials(client, spec, root, uri, "time", checkpoints=stage == "drafter")
    if not finished:
        raise ValueError(f"time: sweep {name!r} has no finished trial to time (in {uri})")
    bound = bind_existing_targets(spec, root, "time")
    size = getattr(settings, SIZE[stage])
    with Lease(root / name, name, f"trials time {name}"):
        from . import runner

        check_checkpoints(checkpoints, bound, "time")  # before Ray starts, and before anything is said
        say(f"{name}: timing {len(finished)} run(s) ({RESPONSE[stage]}): {settings.rounds} rounds, "
            f"{settings.warmup} warm-up(s) each, {size} {SIZE[stage]} a repetition")

        started = runner.init_ray(address)
        try:
            record = _drive(spec, stage, {t.key: bound[t.key].to_dict() for t in finished}, checkpoints, settings, say)
        finally:
            if started:
                import ray

                ray.shutdown()
        record["runs"] = {t.key: t.run_name for t in finished}
        log_pass(client, {t.key: runs[t.key] for t in finished}, record, root / name)
    return record


def _drive(spec, stage: str, configs: dict[str, dict], checkpoints: dict[str, str], settings: TimingSettings,
           say) -> dict:
    """Run the pass's task, saying one line per round; the pass's record."""
    import ray

    from .progress import clock

    pass_id, started, t0 = _pass_id(), time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter()
    res = {"num_cpus": spec.resources.get("cpu", 1), "num_gpus": spec.resources.get("gpu", 0)}
    stream = ray.remote(max_retries=0)(timing_task).options(**res).remote(stage, configs, checkpoints, asdict(settings))
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
    size = SIZE[stage]
    return {"id": pass_id, "rounds": settings.rounds, "warmup": settings.warmup, size: getattr(settings, size),
            "seed": settings.seed, "node": head["node"], "threads": head["threads"], "started": started,
            "seconds": round(time.perf_counter() - t0, 3), "response": RESPONSE[stage], "stage": stage,
            "orders": [r["order"] for r in rounds], "times": [r["times"] for r in rounds],
            "values": values(stage, rounds), "jack": jack_values(stage, rounds)}


def _pass_id() -> str:
    now = time.time()
    return time.strftime("%Y%m%dT%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def log_pass(client, runs: dict, record: dict, exp_dir: Path | None = None) -> None:
    """The pass's values to each run (a new step after its last one, then the tag), and
    last the pass itself to the sweep's parent run (tag and artifact). Kept in storage
    first (`dspark.kept`, in `exp_dir`), so that `trials recover` rebuilds it."""
    from dspark.kept import keep_parent_record, keep_run_record
    from dspark.record import sweep_parent
    from dspark.track import log_metrics

    from .reeval import next_step

    size = SIZE[record["stage"]]
    steps = {key: next_step(client, run) for key, run in runs.items()}
    per_run = {key: {record["response"]: record["values"][key], "timing/rounds": record["rounds"],
                     f"timing/{size}": record[size], **record.get("jack", {}).get(key, {})} for key in runs}
    summary = json.dumps({k: record[k] for k in ("id", "rounds", "warmup", size, "seed", "node", "started", "seconds",
                                                 "response")})
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
