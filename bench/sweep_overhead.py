"""Ray Tune + MLflow overhead: a small sweep through the real stack against the same
trials run one after another in a plain loop (dspark.train, no Ray, no tracking), the
loop's time divided by the sweep's parallelism. The parts of the sweep's time are measured
by the bench's own stopwatches, set in the sweep's place for its runs: a Tune callback, a
timed MLflow client, and a trainable that times each trial's imports and `tune.report`
(a user's sweep records none of them).

    python bench/sweep_overhead.py [--draft-steps 600] [--checkpoint-every-s 60]
    python bench/sweep_overhead.py --draft-steps 10 --target-steps 10     # quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time
import uuid
from pathlib import Path

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.train import train, train_shared_target
from ray.tune import Callback

from trials import runner
from trials.driver import cluster
from trials.driver import ledger
from trials.validate import parse
from dspark import targets
from trials.trainable import trial_fn

PARALLEL = 2


def spec(draft_steps: int, checkpoint_every_s: float, target_steps: int = 200):
    return parse({
        "name": "overhead", "max_concurrent": PARALLEL, "replicates": 1,
        "base": {"preset": "tiny", "target_steps": target_steps, "draft_steps": draft_steps,
                 "eval_interval": min(50, draft_steps),
                 "spec_prompts": 4, "checkpoint_every_s": checkpoint_every_s},
        "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
                    "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}}},
    })


def plain(s, target: Path, tmp: str) -> tuple[float, float]:
    """(a plain loop of the trials, one thread; the same trials in two plain processes)."""
    import multiprocessing as mp

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # each Ray trial gets one CPU (one torch thread); so does the loop
    t0 = time.perf_counter()
    for t in s.trials:
        train(t.config.replace(target_path=str(target), out_dir=f"{tmp}/loop/{t.replicate}").native())
    loop = time.perf_counter() - t0
    torch.set_num_threads(threads)
    jobs = [(t.config.replace(target_path=str(target), out_dir=f"{tmp}/pool/{i}").to_dict(),)
            for i, t in enumerate(s.trials)]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(PARALLEL) as pool:
        pool.starmap(_one_thread_train, jobs)
    return loop, time.perf_counter() - t0


class SweepClock(Callback):
    """The bench's stopwatch inside Tune (the sweep itself keeps no timings): when Tune's
    run starts and ends, and each trial's start and end in the driver."""

    def __init__(self):
        self.tune_start = self.tune_end = float("nan")
        self.trials: dict[str, list[float]] = {}

    def setup(self, **info):
        self.tune_start = time.perf_counter()

    def on_trial_start(self, iteration, trials, trial, **info):
        self.trials.setdefault(trial.trial_id, [time.perf_counter(), float("nan")])

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.trials[trial.trial_id][1] = time.perf_counter()

    def on_experiment_end(self, trials, **info):
        self.tune_end = time.perf_counter()


class TimedClient:
    """An MLflow client whose every call adds its time to `spent[0]`: the driver's MLflow cost."""

    def __init__(self, client, spent: list[float]):
        self._client, self._spent = client, spent

    def __getattr__(self, name):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._spent[0] += time.perf_counter() - t0

        return timed


def stopwatch_trainable(cost_dir: str):
    """`trials.trainable.trainable` with a stopwatch around each trial, in its worker: the
    seconds its torch and dspark.train imports take (none in an actor Tune reuses, which has
    them) and the seconds in `tune.report`, which persists each checkpoint to the sweep's
    storage (the trial's last report included). Each trial writes {"import", "report"} to
    a JSON file of its own in `cost_dir`."""
    from ray import tune

    def make(spec, resume_dirs: dict[str, str]):
        res = {"cpu": spec.resources.get("cpu", 1), "gpu": spec.resources.get("gpu", 0)}  # as trials.trainable asks

        def fn(params):
            entered = time.perf_counter()
            import torch  # noqa: F401
            import dspark.train  # noqa: F401  (in the trial: the import is what is timed)
            cost = {"import": time.perf_counter() - entered, "report": 0.0}
            report = tune.report

            def timed_report(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return report(*args, **kwargs)
                finally:
                    cost["report"] += time.perf_counter() - t0

            tune.report = timed_report  # this worker's Tune: trial_fn looks tune.report up at each call
            try:
                t = spec.trial_for(params)
                trial_fn(spec.wl, t.key, t.config, res["cpu"], resume_dirs.get(t.key), tuple(spec.responses),
                         t.run_name)
            finally:
                tune.report = report  # a reused actor runs the next trial with it restored
                (Path(cost_dir) / f"{uuid.uuid4().hex}.json").write_text(json.dumps(cost))

        fn.__name__ = f"{spec.wl.name}_trial"
        return tune.with_resources(fn, res)

    return make


@contextlib.contextmanager
def stopwatches(cost_dir: Path):
    """For a sweep run inside it: the driver's MLflow calls timed (their seconds in the list
    it yields) and each trial's imports and reports (`stopwatch_trainable`, in cost_dir)."""
    spent = [0.0]
    plain_client, plain_trainable = ledger.tracking_client, runner.trainable
    ledger.tracking_client = lambda uri: TimedClient(plain_client(uri), spent)  # the sweep's records open through it
    runner.trainable = stopwatch_trainable(str(cost_dir))
    try:
        yield spent
    finally:
        ledger.tracking_client, runner.trainable = plain_client, plain_trainable


def analysis_seconds(s, uri: str) -> float:
    """How long the attribution of the sweep takes (load + ANOVA), after it."""
    from analysis.anova import AnalysisError
    from analysis.attribution import analyse
    from analysis.sweep_reader import load_runs

    t0 = time.perf_counter()
    try:
        analyse(load_runs(s.name, uri).runs, ["tf/tau", "spec/tau"], list(s.factors))
    except AnalysisError:  # one replicate of a 2x2 leaves no residual: timed all the same
        pass
    return time.perf_counter() - t0


def through_ray(s, target: Path, tmp: str, tag: str = "cold", ray_running: bool = False) -> dict:
    """The sweep through Ray Tune + MLflow, its parts timed from outside: Ray's start and
    shutdown here (as `trials run` pays them, unless `ray_running`), Tune's run and the
    trials by SweepClock, the driver's MLflow calls and each trial's imports and reports by
    `stopwatches`."""
    import shutil

    import ray

    h, _ = targets.address(s.trials[0].config.native())
    dest = targets.target_file(Path(tmp) / f"st-{tag}", h)
    dest.parent.mkdir(parents=True)
    shutil.copy(target, dest)  # the shared target is common to both paths: not timed
    clock, cost_dir = SweepClock(), Path(tmp) / f"cost-{tag}"
    cost_dir.mkdir()
    t0 = time.perf_counter()
    with stopwatches(cost_dir) as spent:
        if not ray_running:
            cluster.init_ray(None)  # the local Ray `trials run` starts
        t_ray = time.perf_counter()
        out = runner.run(s, tracking_uri=f"sqlite:///{tmp}/m-{tag}.db", storage=f"{tmp}/st-{tag}", verbose=0,
                         callbacks=[clock])
        t_run = time.perf_counter()
        if not ray_running:
            ray.shutdown()
    t_end = time.perf_counter()
    total = t_end - t0  # as `trials run` pays it: Ray's start and shutdown included
    first = min(a for a, _ in clock.trials.values())
    last = max(b for _, b in clock.trials.values())
    ray_start = t_ray - t0
    # the sweep's own set-up and end: corpus hash for the target address, MLflow experiment
    # and parent (their tables created while Ray starts), Tune's start and stop, Ray's shutdown
    around = total - ray_start - (last - first)
    parts = {"before_tune": clock.tune_start - t_ray, "tune_start": first - clock.tune_start,
             "tune_end": clock.tune_end - last, "close": t_run - clock.tune_end, "ray_shutdown": t_end - t_run}
    df = out["results"].get_dataframe()
    costs = [json.loads(p.read_text()) for p in cost_dir.glob("*.json")]  # one per trial
    walls = [b - a for a, b in clock.trials.values()]
    return {"total": total, "ray_start": ray_start, "around": around, "parts": parts, "tracking": spent[0],
            "analysis": analysis_seconds(s, f"sqlite:///{tmp}/m-{tag}.db"), "wall": sum(walls) / len(walls),
            "in_trainable": float(df["time_total_s"].mean()),
            "import": sum(c["import"] for c in costs) / len(costs),
            "report": sum(c["report"] for c in costs) / len(costs), "reports": float(df["training_iteration"].mean())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--draft-steps", type=int, default=600)
    ap.add_argument("--checkpoint-every-s", type=float, default=60.0,
                    help="the trials' checkpoint_every_s (0: a checkpoint at every eval)")
    ap.add_argument("--target-steps", type=int, default=200, help="the shared target's steps (a quick check: 10)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s = spec(args.draft_steps, args.checkpoint_every_s, args.target_steps)
        target = Path(tmp) / "target.pt"
        train_shared_target(s.trials[0].config.native(), target)
        loop, pool_s = plain(s, target, tmp)
        r = through_ray(s, target, tmp)
        warm = warm_ray(s, target, tmp)
    n = len(s.trials)
    actor = r["wall"] - r["in_trainable"]  # actor start, handing over, teardown: Tune's, not the trainer's
    per_trial = actor + r["report"] + r["tracking"] / n
    print(f"{n} tiny trials ({args.draft_steps} draft steps each, checkpoint_every_s {args.checkpoint_every_s:g}), "
          f"parallelism {PARALLEL}, one thread each")
    print(f"plain loop              {loop:7.1f} s  -> loop / {PARALLEL} = {loop / PARALLEL:.1f} s")
    print(f"2 plain processes       {pool_s:7.1f} s  (what {PARALLEL} cores give without Ray: {loop / pool_s:.2f}x)")
    print(f"Ray Tune + MLflow       {r['total']:7.1f} s")
    print("where Ray's extra time goes (seconds; per sweep, or mean per trial):")
    print(f"  Ray start (per sweep)                    {r['ray_start']:6.2f}")
    print("  shared-target task                         0.00  (reused from storage; its training is common to both)")
    p = r["parts"]
    print(f"  sweep set-up and end                     {r['around']:6.2f} per sweep:")
    print(f"    target addressing, MLflow parent, git  {p['before_tune']:6.2f}")
    print(f"    Tune start, to the first trial's start {p['tune_start']:6.2f}")
    print(f"    Tune end, after the last trial's end   {p['tune_end']:6.2f}")
    print(f"    closing the parent run                 {p['close']:6.2f}")
    print(f"    Ray shutdown                           {p['ray_shutdown']:6.2f}")
    print(f"  trial actor start, handover, teardown    {actor:6.2f} per trial (driver wall {r['wall']:.1f} s "
          f"- in trainable {r['in_trainable']:.1f} s)")
    print(f"  imports in the trial's worker            {r['import']:6.2f} per trial (a plain process pays them too)")
    print(f"  checkpoint persistence in tune.report    {r['report']:6.2f} per trial ({r['reports']:.0f} reports)")
    print(f"  MLflow calls in the driver               {r['tracking']:6.2f} per sweep ({r['tracking'] / n:.2f} per trial)")
    print(f"  analysis of the result (load + ANOVA)    {r['analysis']:6.2f} per sweep (after the sweep, not timed above)")
    print(f"overhead vs loop/{PARALLEL}       {100 * (r['total'] / (loop / PARALLEL) - 1):+7.1f} %")
    print(f"with Ray already running (`ray start`, then `trials run --address`): {warm['total']:.1f} s, "
          f"{100 * (warm['total'] / pool_s - 1):+.1f} % vs 2 processes (no Ray start or shutdown in the sweep)")
    print(f"overhead vs 2 processes {100 * (r['total'] / pool_s - 1):+7.1f} %   (goal <= 15%, stretch 5%)")
    print(f"fixed cost per trial    {per_trial:7.2f} s   (goal <= 2 s)")


def warm_ray(s, target: Path, tmp: str) -> dict:
    """The same sweep on a Ray started beforehand and left running, as a cluster is."""
    import ray

    cluster.init_ray(None)  # the local Ray `trials run` would start, bound to loopback
    try:
        return through_ray(s, target, tmp, tag="warm", ray_running=True)
    finally:
        ray.shutdown()


def _one_thread_train(config: dict) -> None:
    torch.set_num_threads(1)
    train(config)


if __name__ == "__main__":
    main()
