"""What a person watching a sweep sees: one line per trial event, and a short arms table
at the end. A Ray Tune callback (Tune's own output is switched off: its table and its
box of every metric per finished trial printed about 165 lines a trial).

    [demo 3/16 done 4m10s, ~18m left] finished aligned·block·hidden r0  spec/tau 2.781  ...

The columns are the sweep's primary responses (its spec's `responses:`), else the stage's
default responses that the stage measures and that vary (`dspark.metrics`): never a
metric that is degenerate, unmeasured or constant in the stage.
"""

from __future__ import annotations

import math
import sys
import time

from ray.tune import Callback

from dspark import metrics
from dspark.record import store_key

from .spec import SweepSpec, columns


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


class ProgressLines(Callback):
    """One line per trial event: started, evaluated (each reported step), finished, failed."""

    def __init__(self, spec: SweepSpec, todo: int, out=None):
        self.spec = spec
        self.cols = columns(spec)
        self.total = len(spec.trials)
        self.done = self.total - todo  # finished before this run (a resume)
        self.ran = 0
        self.t0 = time.monotonic()
        self.out = out
        self._steps: dict[str, int] = {}

    def __getstate__(self):  # Tune pickles callbacks with the experiment; streams do not pickle
        state = dict(self.__dict__)
        state["out"] = None
        return state

    def _say(self, event: str, trial, extra: str = "") -> None:
        elapsed = time.monotonic() - self.t0
        left = elapsed / self.ran * (self.total - self.done) if self.ran else float("nan")
        eta = f", ~{clock(left)} left" if self.ran and self.done < self.total else ""
        name = self.spec.trial_for(trial.config).run_name
        line = f"[{self.spec.name} {self.done}/{self.total} done {clock(elapsed)}{eta}] {event} {name}"
        print(line + (f"  {extra}" if extra else ""), file=self.out or sys.stdout, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._say("started", trial)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        step = int(result.get("step", 0) or 0)
        shown = values(result, self.cols)
        if not shown or self._steps.get(trial.trial_id, -1) >= step:
            return
        self._steps[trial.trial_id] = step
        self._say(f"step {step}", trial, shown)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        self.ran += 1
        self._say("finished", trial, values(trial.last_result or {}, self.cols))

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        self.ran += 1
        lines = (getattr(trial, "error_msg", "") or "").strip().splitlines()
        self._say("FAILED", trial, lines[-1][:160] if lines else "")


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
    untimed = [c for c in cols if metrics.is_timed(c) and not any(store_key(c) in m for r in by_arm.values()
                                                                  for m in r)]
    if untimed:
        lines.append(f"({', '.join(untimed)}: measured by the interleaved timing pass, `trials time {spec.name}`)")
    return "\n".join(lines)
