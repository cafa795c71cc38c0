"""What a person watching a sweep sees: a line per finished (or failed) trial, a line on
what runs whenever a minute passes without one, and a short arms table at the end. A Ray
Tune callback (Tune's own output is switched off: its table and its box of every metric per
finished trial printed about 165 lines a trial; its slow-operation warnings are filtered,
`quiet_slow_warnings`). `trials run -v` adds a line per started trial and per evaluation.

    [demo 3/16 done 4m10s, ~8m20s left] finished aligned·block·hidden r0  val/loss 2.781  ...
    [demo 3/16 done 5m10s, ~7m20s left] running aligned·block·markov r0 (1m02s), shifted·block·hidden r0 (40s)

The clock counts from the command's start (a shared target trained first included). The
time left is a schedule of what remains on the sweep's slots: each running trial needs the
median time of the trials finished so far, less its age; each pending one the median.

The columns are the sweep's primary responses (its spec's `responses:`), else the stage's
default responses that the stage measures and that vary (the workload's registry): never a
metric that is degenerate, unmeasured or constant in the stage.
"""

from __future__ import annotations

import logging
import math
import sys
import time

from ray.tune import Callback

from trials.store.keys import ERROR_KEY, ERROR_TAG, store_key

from trials.expand import columns
from trials.spec import SweepSpec

from trials.saved import grouped_causes


def clock(seconds: float) -> str:
    """Seconds as a person reads them: 42s, 3m05s, 1h07m ("?" when unknown)."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def values(result: dict, cols: list[str]) -> str:
    out = []
    for c in cols:
        v = result.get(c)
        if isinstance(v, (int, float)) and math.isfinite(v):
            out.append(f"{c} {v:.4g}")
    return "  ".join(out)


HEARTBEAT_S = 60.0  # a line on what runs when nothing was said for this long


def command_started() -> float:
    """The wall time this process started: a sweep's clock counts from the command's start."""
    import psutil

    return psutil.Process().create_time()


def time_left(now: float, durations: list[float], running: list[float], pending: int, slots: int) -> float:
    """Seconds until the last trial ends: running trials (by start time) and pending ones on
    `slots` slots, each trial taking the median of `durations` (NaN before one finished)."""
    if not durations:
        return float("nan")
    typical = sorted(durations)[len(durations) // 2]
    free = sorted(max(typical - (now - t), 0.0) for t in running)
    free += [0.0] * max(slots - len(free), 0)
    for _ in range(pending):
        free.sort()
        free[0] += typical
    return max(free) if free else 0.0


class ProgressLines(Callback):
    """One line per finished or failed trial, and one on what runs after HEARTBEAT_S of
    silence; `verbose` 2 adds a line per started trial and per evaluation."""

    def __init__(self, spec: SweepSpec, todo: int, out=None, verbose: int = 1, t0: float | None = None,
                 slots: int | None = None):
        self.spec = spec
        self.cols = columns(spec)
        self.total = len(spec.trials)
        self.done = self.total - todo  # finished before this run (a resume)
        self.t0 = command_started() if t0 is None else t0
        self.out = out
        self.verbose = verbose
        self.slots = slots or 0  # the sweep's concurrency limit (0: as many as run at once)
        self._steps: dict[str, int] = {}
        self._started: dict[str, float] = {}  # running trial id -> its start (wall time)
        self._durations: list[float] = []  # of the trials this command finished
        self._said = time.time()
        self._most = 0  # the most trials seen running at once

    def __getstate__(self):  # Tune pickles callbacks with the experiment; streams do not pickle
        state = dict(self.__dict__)
        state["out"] = None
        return state

    def _left(self, now: float) -> float:
        slots = self.slots or self._most or 1
        pending = self.total - self.done - len(self._started)
        return time_left(now, self._durations, list(self._started.values()), max(pending, 0), slots)

    def _print(self, text: str) -> None:
        self._said = time.time()
        print(text, file=self.out or sys.stdout, flush=True)

    def _head(self) -> str:
        now = time.time()
        left = self._left(now)
        eta = f", ~{clock(left)} left" if self.done < self.total and math.isfinite(left) else ""
        return f"[{self.spec.name} {self.done}/{self.total} done {clock(now - self.t0)}{eta}]"

    def _say(self, event: str, trial, extra: str = "") -> None:
        name = self.spec.trial_for(trial.config).run_name
        self._print(f"{self._head()} {event} {name}" + (f"  {extra}" if extra else ""))

    def on_trial_start(self, iteration, trials, trial, **info):
        self._started[trial.trial_id] = time.time()
        self._most = max(self._most, len(self._started))
        if self.verbose >= 2:
            self._say("started", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._started.setdefault(trial.trial_id, time.time())  # a trial Tune restored mid-run
        step = int(result.get("step", 0) or 0)
        shown = values(result, self.cols)
        if self.verbose < 2 or not shown or self._steps.get(trial.trial_id, -1) >= step:
            return
        self._steps[trial.trial_id] = step
        self._say(f"step {step}", trial, shown)

    def _ended(self, trial) -> None:
        self.done += 1
        start = self._started.pop(trial.trial_id, None)
        if start is not None:
            self._durations.append(time.time() - start)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._ended(trial)
        cause = (trial.last_result or {}).get(ERROR_KEY)
        if isinstance(cause, str) and cause:  # its trainer raised: ended once, not retried
            self._say("FAILED", trial, cause[:160])
            return
        self._say("finished", trial, values(trial.last_result or {}, self.cols))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial)
        lines = (getattr(trial, "error_msg", "") or "").strip().splitlines()
        self._say("FAILED", trial, lines[-1][:160] if lines else "")

    def on_step_end(self, iteration, trials, **info):
        now = time.time()
        if now - self._said < HEARTBEAT_S or not self._started:
            return
        names = {t.trial_id: self.spec.trial_for(t.config).run_name for t in trials}
        running = sorted(self._started.items(), key=lambda kv: kv[1])
        shown = ", ".join(f"{names.get(k, k)} ({clock(now - t)})" for k, t in running[:3])
        more = f" and {len(running) - 3} more" if len(running) > 3 else ""
        self._print(f"{self._head()} running {shown}{more}")


def arms_table(spec: SweepSpec, runs: dict) -> str:
    """The end of a sweep: each arm's mean of the shown responses over its finished runs."""
    cols = columns(spec)
    by_arm: dict[str, list[dict]] = {}
    for t in spec.trials:
        r = runs.get(t.key)
        if r is not None and r.info.status == "FINISHED":
            label = t.run_name.rsplit(" r", 1)[0]
            by_arm.setdefault(label, []).append(r.data.metrics)
    if not by_arm:
        return ""
    width = max(len(a) for a in by_arm)
    lines = ["arm".ljust(width) + "  n  " + "  ".join(c.rjust(12) for c in cols)]
    for arm, rows in sorted(by_arm.items()):
        means = []
        for c in cols:
            vals = [m[store_key(c)] for m in rows if store_key(c) in m]
            means.append(f"{sum(vals) / len(vals):12.4g}" if vals else " " * 12)
        lines.append(arm.ljust(width) + f"  {len(rows)}  " + "  ".join(means))
    untimed = [c for c in cols if spec.wl.registry.is_timed(c) and not any(store_key(c) in m for r in by_arm.values()
                                                                  for m in r)]
    if untimed:
        lines.append(f"({', '.join(untimed)}: measured by the interleaved timing pass, `trials time {spec.name}`)")
    return "\n".join(lines)


def failure_lines(spec: SweepSpec, runs: dict) -> list[str]:
    """The failed trials' causes (each run's error tag, its last line: the type and message)."""
    causes = []
    for t in spec.trials:
        r = runs.get(t.key)
        if r is not None and r.info.status == "FAILED":
            text = (r.data.tags.get(ERROR_TAG) or "").strip().splitlines()
            causes.append((t.run_name, text[-1] if text else "no cause recorded"))
    return grouped_causes(causes)


class _NotSlowWarnings(logging.Filter):
    """Drops Tune's "... took 0.8 s, which may be a performance bottleneck" warnings: they
    time the driver's own callbacks (this sweep's MLflow writes and progress lines) on a busy
    machine, which a user cannot act on; `bench/sweep_overhead.py` measures that cost."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "performance bottleneck" not in record.getMessage()


def quiet_slow_warnings() -> None:
    """Tune's slow-operation warnings out of a quiet sweep's output (once per process)."""
    log = logging.getLogger("ray.tune.utils.util")  # where Tune's warn_if_slow logs
    if not any(isinstance(f, _NotSlowWarnings) for f in log.filters):
        log.addFilter(_NotSlowWarnings())
