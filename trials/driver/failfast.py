"""Fail fast: a sweep whose trainer fails the same way in the first trial of every cell stops
there, says so once, and leaves the rest unrun (`trials resume` runs them once it is fixed).

A trainer that raises on its first step would otherwise run every trial of the design to the
same error. The rule needs no clock and no threshold: once the first trial to end in each
cell of the trials run now has ended, and every one of them failed with the same cause (its
type and message, its run's name and traceback path aside), no later trial can tell anything
new. Tune stops the sweep (`FailFast.stopper`); trials stopped mid-way are closed KILLED, not
FAILED, so a resume reruns them."""

from __future__ import annotations

from ray import tune
from ray.tune import Callback

from trials.tracking import raised_error


def same_cause(cause: str) -> str:
    """A cause without what differs from run to run (the traceback's path)."""
    return cause.partition(" (traceback: ")[0].strip()


class FailFast(Callback):
    """Watches the trials that end: `tripped` holds the one cause once the first trial of every
    cell failed with it ("" until then, and for good once any first trial did not fail)."""

    def __init__(self, spec, todo):
        self.spec = spec
        self.cells = {t.cell for t in todo}
        self.first: dict[str, str] = {}  # cell -> the cause its first ended trial failed with ("": it did not)
        self.tripped = ""
        self.example = ""  # a run that shows the cause, with its traceback

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._ended(trial, raised_error(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._ended(trial, "")  # the worker or the cluster, not the trainer: Tune's own retries decide

    def _ended(self, trial, raised: str) -> None:
        cell = self.spec.trial_for(trial.config).cell
        if cell in self.first or self.tripped:
            return
        self.first[cell] = same_cause(raised)
        if raised and not self.example:
            self.example = f"{self.spec.trial_for(trial.config).run_name}: {raised}"
        causes = set(self.first.values())
        if set(self.first) == self.cells and len(causes) == 1 and "" not in causes and len(self.cells) >= 1:
            self.tripped = causes.pop()

    def stopper(self) -> "StopAll":
        return StopAll(self)

    def line(self, not_run: int) -> str:
        """What the sweep says once it stopped early, in one line."""
        return (f"stopped early: the first trial of each of the {len(self.cells)} cell(s) failed with the same error, "
                f"so {not_run} trial(s) were not run; e.g. {self.example}; fix the trainer, then: "
                f"trials resume {self.spec.name}")


class StopAll(tune.Stopper):
    """Tune's stopper for a `FailFast`: no trial alone, the whole sweep once it tripped."""

    def __init__(self, watch: FailFast):
        self.watch = watch

    def __call__(self, trial_id, result):
        return False

    def stop_all(self):
        return bool(self.watch.tripped)
