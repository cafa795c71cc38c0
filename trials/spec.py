"""Sweep specs, the data model: a sweep (`SweepSpec`) and its trials (`Trial`). YAML comes in
through `trials.validate` (every check, one line per problem), the design's algebra is
`trials.fraction`, and `trials.expand` resolves a spec into its trials.

```yaml
name: warmup-and-clip
base: {preset: tiny, steps: 200}
factors:
  W: {none: {warmup: 0}, some: {warmup: 50}}
  C: {off: {grad_clip: 0.0}, on: {grad_clip: 1.0}}
replicates: 3                       # seeds per cell
design: full                        # or {generators: {D: ABC}} for a 2^(k-p) fraction
controls: {lr0: {lr: 0.0}}          # optional extra arms outside the factorial
responses:                          # the primary responses, each with its margin
  val/loss: {better: lower, margin: 0.02}
contrasts:                          # optional: two settings of some factors, each averaged over the rest
  diagonal: {from: {W: none, C: off}, to: {W: some, C: on}}
primary_terms: [W, C, lr0]          # the family's terms (default: every main effect, contrast and control)
sequential: {max_replicates: 6}     # looks planned before the first one (alpha 0.05 unless given;
                                    # look_every: blocks between looks, 1 unless given)
confirms: {...}                     # a confirmation's screening study and estimate (analysis plan --confirm)
timing: {rounds: 5, steps: 20}      # how the tool times a timed primary response itself (trials time's flags)
resources: {cpu: 1, gpu: 0}         # per trial
max_concurrent: 2
max_failures: 2
```

Each factor maps level names to trainer-config overrides. A fraction's generated factor
takes, in every run, the product of the coded levels (-1 = first level listed, +1 = the
second) of the factors in its generator. A named contrast compares two settings of some
factors (e.g. the recipe "warm-up with clipping" against "neither"): the mean
of the cells at `to` minus the mean of the cells at `from`, each averaged over the other
factors, which every side must hold equally often. A primary response's margin is the smallest
effect of practical interest: the analysis calls a term negligible only where equivalence
within +-margin is shown. The family of verdicts is primary responses x primary terms; other
terms and responses are reported at the same alpha, outside the family. A sequential plan
declared here is recorded on the sweep's parent run at `trials run`, before any look, so
that every later look spends alpha on it (`analysis.sequential`). Seeds come from (sweep name, replicate), so every
cell of one replicate shares its seed (a blocked design) and a rerun reproduces.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any

from trials.store.keys import ARM_TAG, CELL_TAG, FACTOR_PREFIX, REPLICATE_TAG, RUN_ORDER_TAG, SEED_TAG, TRIAL_KEY_TAG

from .workload import DEFAULT as DEFAULT_WORKLOAD

# Sweep, factor, level and control names: they become trial keys (`F=level|G=level#r0`),
# folder names, MLflow names and tags and analysis columns, so none may hold `|`, `=` or
# `#` (two design rows could then share a key) or be longer than every store takes.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_RULE = "letters, digits, '_', '-' and '.' only, starting with a letter or digit, at most 64 characters"
# a run's own columns in Tune's results and in analysis, and the control arms' cell: no
# factor may take these names
RESERVED_NAMES = ("replicate", "arm", "cell", "seed", "run_order", "run_id", "run_name", "status", "control")
MAX_TRIALS = 10_000  # cells x replicates; checked before any trial is built
MAX_RUN_NAME = 250  # MLflow's run name column (VARCHAR(250) on every SQL store)


class SpecError(ValueError):
    """Every problem found in a spec, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True)
class Trial:
    key: str  # cell + replicate, unique in the sweep
    cell: str  # e.g. "D1=shifted|D2=block"
    replicate: int
    seed: int
    levels: dict[str, str]  # factor -> level ("" for a control arm)
    arm: str  # "factorial" or "control:<name>"
    config: Any  # the workload's config
    run_order: int = 0  # launch position in the sweep (0-based), randomised inside each replicate block
    named: tuple[str, ...] = ()  # factors whose level names another factor shares: named in the run name

    @property
    def tags(self) -> dict[str, str]:
        """What identifies the trial in a run's tags (the MLflow runs and the local runner's rows)."""
        tags = {CELL_TAG: self.cell, REPLICATE_TAG: str(self.replicate), SEED_TAG: str(self.seed),
                TRIAL_KEY_TAG: self.key, ARM_TAG: self.arm, RUN_ORDER_TAG: str(self.run_order)}
        tags.update({f"{FACTOR_PREFIX}{f}": level for f, level in self.levels.items()})
        return tags

    @property
    def run_name(self) -> str:
        """Short and unique in the sweep, readable at a glance in the MLflow runs table:
        the levels in factor order, then the replicate (the full cell is the `cell` tag); a
        level whose name another factor shares as `factor=level` (`dropout=off·warmup=on`)."""
        if self.arm.startswith("control:"):
            return f"control {self.arm.split(':', 1)[1]} r{self.replicate}"
        parts = [f"{f}={lv}" if f in self.named else lv for f, lv in self.levels.items()]
        return f"{'·'.join(parts)} r{self.replicate}"


@dataclass
class SweepSpec:
    name: str
    base: dict[str, Any]
    factors: dict[str, dict[str, dict[str, Any]]]
    workload: str = DEFAULT_WORKLOAD  # the trainer swept, by name (`trials.workload.load_workload`)
    replicates: int = 1
    generators: dict[str, list[str]] = field(default_factory=dict)  # empty = full factorial
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=lambda: {"cpu": 1, "gpu": 0})
    max_concurrent: int = 0  # 0 = as many as resources allow
    max_failures: int = 2
    description: str = ""
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)  # primary: {better, margin}
    # name -> {"from": {factor: level}, "to": {factor: level}}: a difference of two settings
    contrasts: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)
    primary_terms: list[str] = field(default_factory=list)  # [] = every main effect, contrast and control
    sequential: dict[str, Any] = field(default_factory=dict)  # {max_replicates, alpha, ...}; {} = no plan
    # a confirmation's link to the screening study it answers (`analysis plan --confirm` writes
    # it): {study, term, response, estimate, low, high, verdict}; {} = not a confirmation
    confirms: dict[str, Any] = field(default_factory=dict)
    # how the tool times the sweep itself where it must (trials.timing.timing_settings.TimingSettings' fields); {} = its defaults
    timing: dict[str, int] = field(default_factory=dict)
    trials: list[Trial] = field(default_factory=list)
    # the workload itself, loaded once where the spec was read (`trials.workload.load_workload`): the
    # engine takes it from here; `workload` is its name, for storage
    loaded: Any = field(default=None, repr=False, compare=False)

    @property
    def wl(self):
        if self.loaded is None:
            raise ValueError(f"sweep {self.name!r}: its workload was not loaded (a spec is made by trials.validate)")
        return self.loaded

    @property
    def design(self) -> str:
        if not self.generators:
            return "full"
        k, p = len(self.factors), len(self.generators)
        return f"2^({k}-{p})"

    def tune_params(self, trial: Trial) -> dict[str, Any]:
        """The trial as Ray Tune sees it: one dimension per factor, the replicate and, in a
        sweep with controls, the arm. The names are the MLflow tags' and analysis columns'."""
        params: dict[str, Any] = {**trial.levels, "replicate": trial.replicate}
        if self.controls:
            params["arm"] = trial.arm
        return params

    def trial_for(self, params: dict[str, Any]) -> Trial:
        """The trial at a point of Tune's search space (the inverse of `tune_params`).
        Called for every trial event, so it looks the point up in an index built once."""
        try:
            return self._trials_by_point[self._point(params)]
        except KeyError:
            raise KeyError(f"no trial of sweep {self.name!r} at {params}") from None

    def _point(self, params: dict[str, Any]) -> tuple:
        keys = [*self.factors, "replicate", *(["arm"] if self.controls else [])]
        return tuple(params.get(k) for k in keys)

    @functools.cached_property
    def _trials_by_point(self) -> dict[tuple, Trial]:
        return {self._point(self.tune_params(t)): t for t in self.trials}



def same_design(a: SweepSpec, b: SweepSpec) -> bool:
    """Same trials with the same configs (what decides whether a sweep can be resumed)."""
    def sig(s):
        return sorted((t.key, repr(sorted(t.config.to_dict().items()))) for t in s.trials)
    return a.name == b.name and a.workload == b.workload and sig(a) == sig(b)


def extends(old: SweepSpec, new: SweepSpec) -> bool:
    """`new` holds every trial of `old` with the same config (it may add replicate blocks):
    what `trials augment` may run on top of a sweep already in storage."""
    mine = {t.key: repr(sorted(t.config.to_dict().items())) for t in new.trials}
    return old.name == new.name and old.workload == new.workload and all(
        mine.get(t.key) == repr(sorted(t.config.to_dict().items())) for t in old.trials)


def replicate_seed(sweep: str, replicate: int) -> int:
    digest = hashlib.sha256(f"{sweep}:{replicate}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2 ** 31)


def run_order(name: str, replicate: int, n: int) -> list[int]:
    """A seeded random permutation of one replicate block's n arms (the order they launch)."""
    digest = hashlib.sha256(f"{name}:order:{replicate}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    order = list(range(n))
    rng.shuffle(order)
    return order
