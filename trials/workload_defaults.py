"""A workload as the engine holds it: the object a spec names, with every optional part of
the interface filled in by its documented default (`trials.workload`'s docstring lists them).

A workload needs four attributes (`CORE`):

    name      its name
    config    its settings: a dataclass (its fields and defaults) or a dict of defaults
    train     train(config, context): one trial; `context(metrics)` reports after each
              evaluation (`context(metrics, checkpoint_dir)` where it saves checkpoints;
              `items=` its evaluation's per-item values, `trials.store.items`), so that a
              `train(config, report)` reads it as its report (`TrainContext`)
    metrics   {metric: "higher" | "lower"} or {metric: {"better": ..., "margin": ..., "unit": ...}}

Everything else is optional (`trials.workload` lists each capability), and every workload,
DSpark's included, comes through the same door: the core checked in one line each, then each
capability it has. One of the core alone gets, here:

- config fields from its dataclass or dict; `seed` and `out_dir` plumbing, every other field
  "objective" (`roles`, a dict, says otherwise); the replicate's seed seeds Python's, NumPy's
  and torch's generators before `train` where the config has no `seed` field;
- one variant; every metric measured by every arm; a metric with a margin is a primary
  response where a spec declares none;
- no checkpoints (a stopped trial starts again), no shared artifacts, no re-evaluation, no
  timing pass, no smoke settings, no notebooks: a command that needs one says so in one line;
- a report gets a `step` (1, 2, ...) where the workload gives none; its `items` become the
  run's items artifact; `context.resume_from` is None (nothing to continue from) and
  `context.before_step` does nothing.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import random
import re
from typing import Any

from .store.items import encode as encode_items
from .registry import Registry, Row, declaration_problem
from .store.record import margin_problem
from .workload_config import ConfigView, SharedView, field_types, own, plain_values, type_problem

CORE = ("name", "config", "train", "metrics")
PLUMBING = ("seed", "out_dir")  # a core workload's fields that change no result
ROLES = ("objective", "budget", "evaluation", "plumbing", "target")
SHARED_HOOKS = ("needed", "address", "file", "read", "train", "describe", "bind")  # SharedArtifacts
TIMING_SIZES = ("prompts", "steps")  # what a timing repetition holds: `trials time --prompts N | --steps N`
RESERVED_COUNTS = ("name", "address", "tracking_uri", "storage", "help")  # `trials reeval`'s own options
# the optional functions a workload may have, found once as it is loaded (`Loaded.hook`)
HOOKS = ("smoke", "variant", "unmeasured", "config_problems", "checkpoint_bytes", "checkpoint_problem",
         "finished_problem", "reeval_problem", "reevaluate", "objective")
TRAIN_CONTEXT = ("resume_from", "before_step")  # the context's, never `train`'s own parameters
FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")  # a re-evaluation's file, under the run's eval/


class WorkloadError(ValueError):
    """A workload that cannot be loaded, or lacks part of the interface (one line)."""


def _rows(metrics: dict) -> tuple[dict[str, Row], dict[str, dict]]:
    """A core workload's `metrics` as registry rows, and the margins it gives."""
    rows, margins = {}, {}
    for name, decl in metrics.items():
        decl = {"better": decl} if isinstance(decl, str) else decl
        if not isinstance(name, str) or not isinstance(decl, dict) or decl.get("better") not in ("higher", "lower") \
                or set(decl) - {"better", "margin", "unit"}:
            raise WorkloadError(f"metrics.{str(name)[:60]}: \"higher\", \"lower\" or {{better, margin, unit}} "
                                "(see trials/workload_defaults.py)")
        margin = decl.get("margin")
        if margin is not None:
            if problem := margin_problem(margin):
                raise WorkloadError(f"metrics.{name}.margin: {problem}")
            margins[name] = {"better": decl["better"], "margin": margin if isinstance(margin, str) else float(margin)}
        rows[name] = Row(name, decl["better"], str(decl.get("unit", "")), (), "", headline=True)
    return rows, margins


class _Metrics:
    """A core workload's metric registry (the interface of a workload's `metrics`)."""

    def __init__(self, rows: dict[str, Row]):
        self._rows = rows
        self.REGISTRY = tuple(rows.values())
        self.DEFAULT_RESPONSES = {"": tuple(rows)}

    def lookup(self, name: str):
        return self._rows.get(name)

    def names(self) -> list[str]:
        return sorted(self._rows)


class Loaded:
    """A workload with its defaults filled (module docstring). Every workload comes through
    the same door: the four core attributes, checked here in one line each, then each
    optional capability it has, checked where it has one."""

    def __init__(self, obj: Any, name: str):
        missing = [a for a in CORE if not hasattr(obj, a)]
        if missing:
            raise WorkloadError(f"workload {name!r} lacks {', '.join(missing)}: a workload needs name, config, train "
                                "and metrics (see trials/workload_defaults.py)")
        self.obj, self.path = obj, name
        self.name = str(obj.name)
        self.native_config = None
        self._core(obj)
        self._metric_rows(obj)
        for attr, default in (("variant_field", ""), ("sequential_fields", {}), ("timing", None),
                              ("questions", {}), ("reeval_counts", {}), ("reeval_limits", {}), ("checkpoint_file", ""),
                              ("final_checkpoint", ""), ("notebooks", "")):
            setattr(self, attr, getattr(obj, attr, default))
        if not isinstance(self.notebooks, (str, os.PathLike)) or self.notebooks and not os.path.isabs(self.notebooks):
            raise WorkloadError(f"workload {self.name!r}: notebooks must be a folder's absolute path (never the "
                                f"command's folder), got {str(self.notebooks)[:80]!r}")
        self._check_sequential()
        self.shared = SharedView(self, obj.shared) if getattr(obj, "shared", None) is not None else None
        self._hooks = {h: getattr(obj, h) for h in HOOKS if getattr(obj, h, None) is not None}
        wrong = [h for h, f in self._hooks.items() if not callable(f)]
        if wrong:
            raise WorkloadError(f"workload {self.name!r}: {wrong[0]} must be a function, got "
                                f"{type(self._hooks[wrong[0]]).__name__}")
        self._check_shared()
        self.registry = Registry(self.metrics, self.variant_field)
        self._check_reeval()
        self._check_timing()

    def _check_sequential(self) -> None:
        """`sequential_fields`: {max_<kind>: the config field counting that kind now}."""
        given = self.sequential_fields
        if not isinstance(given, dict):
            raise WorkloadError(f"workload {self.name!r}: sequential_fields must map max_<kind> to a config field")
        for key, field_name in given.items():
            if not isinstance(key, str) or not key.startswith("max_") or key in ("max_replicates", "max_items") or \
                    field_name not in self.fields:
                raise WorkloadError(f"workload {self.name!r}: sequential_fields: {str(key)[:60]!r} -> "
                                    f"{str(field_name)[:60]!r}: max_<kind> (not max_replicates or max_items) -> a "
                                    "config field")

    def _metric_rows(self, obj: Any) -> None:
        """`metric_rows`, where a workload gives them: registry rows richer than `metrics` says
        (measured by some variants only, degenerate or constant in some, headline, timed)."""
        given = getattr(obj, "metric_rows", None)
        if given is None:
            return
        if lacking := [a for a in ("lookup", "REGISTRY", "DEFAULT_RESPONSES") if not hasattr(given, a)]:
            raise WorkloadError(f"workload {self.name!r}: metric_rows lacks {', '.join(lacking)} (see "
                                "trials/registry.py)")
        if unknown := [m for m in self.metrics.names() if given.lookup(m) is None]:
            raise WorkloadError(f"workload {self.name!r}: metrics names {unknown[0]!r}, which its metric_rows lack")
        bad = next(((m.name, why) for m in given.REGISTRY if (why := declaration_problem(m))), None)
        if bad:
            raise WorkloadError(f"workload {self.name!r}: metric_rows' {bad[0]}: {bad[1]}")
        self.metrics = given

    def _check_shared(self) -> None:
        """Shared artifacts name each hook the engine calls (`SharedArtifacts`)."""
        if self.shared is None:
            return
        if missing := [a for a in SHARED_HOOKS if not callable(getattr(self.shared._art, a, None))]:
            raise WorkloadError(f"workload {self.name!r}: its shared lacks {', '.join(missing)} "
                                "(see SharedArtifacts in trials/workload.py)")

    def _check_timing(self) -> None:
        """A timing pass names, for each variant it times, its response and what a repetition
        holds: one of the pass's two sizes (`trials time --prompts N` or `--steps N`)."""
        hooks = self.timing
        if hooks is None:
            return
        missing = [a for a in ("response", "size", "needs_checkpoints", "arms", "values", "items")
                   if not hasattr(hooks, a)]
        if missing:
            raise WorkloadError(f"workload {self.name!r}: its timing lacks {', '.join(missing)} "
                                "(see TimingHooks in trials/workload.py)")
        sizes = hooks.size if isinstance(hooks.size, dict) else {}
        bad = [(v, k) for v, k in sizes.items() if k not in TIMING_SIZES]
        if not sizes or bad or set(sizes) != set(hooks.response):
            raise WorkloadError(f"workload {self.name!r}: timing.size maps each timed variant to "
                                f"{' or '.join(map(repr, TIMING_SIZES))}, got {hooks.size!r}")

    def _check_reeval(self) -> None:
        """A `reevaluate` needs the config fields it counts (`reeval_counts`), each a field."""
        counts = self.reeval_counts
        raisable = counts if "reevaluate" in self._hooks and isinstance(counts, dict) else {}
        raised = [(m.name, f) for m in self.metrics.REGISTRY if (f := getattr(m, "raised_by", "")) and f not in raisable]
        if raised:
            raise WorkloadError(f"workload {self.name!r}: metric_rows' {raised[0][0]}: raised_by {raised[0][1]!r} is "
                                f"not a count its reevaluate raises (reeval_counts: "
                                f"{', '.join(counts) if isinstance(counts, dict) and counts else 'none'})")
        if "reevaluate" not in self._hooks:
            return
        if not isinstance(counts, dict) or not counts:
            raise WorkloadError(f"workload {self.name!r} has `reevaluate` but no reeval_counts: give "
                                "{config field: what it counts}, e.g. {\"eval_batches\": \"held-out batches\"}")
        unknown = [f for f in counts if f not in self.fields]
        if unknown:
            raise WorkloadError(f"workload {self.name!r}: reeval_counts names {unknown[0]!r}, not a config field")
        taken = [f for f in counts if f in RESERVED_COUNTS]
        if taken:
            raise WorkloadError(f"workload {self.name!r}: reeval_counts names {taken[0]!r}, which `trials reeval` "
                                "takes as its own option: count another field")

    def _core(self, obj: Any) -> None:
        given = obj.config
        if isinstance(given, dict):
            defaults = dict(given)
        elif dataclasses.is_dataclass(given):
            cls = given if isinstance(given, type) else type(given)
            self.native_config = cls
            defaults = {f.name: (getattr(given, f.name) if not isinstance(given, type) else f.default)
                        for f in dataclasses.fields(cls)}
            lacking = [k for k, v in defaults.items() if v is dataclasses.MISSING]
            if lacking:
                raise WorkloadError(f"workload {self.name!r}: config field(s) {', '.join(lacking)} need a default "
                                    "(a spec sets only what it varies)")
        else:
            raise WorkloadError(f"workload {self.name!r}: config must be a dataclass or a dict of defaults, got "
                                f"{type(given).__name__}")
        self._make = getattr(obj, "make_config", None)
        if self._make is not None and not callable(self._make):
            raise WorkloadError(f"workload {self.name!r}: make_config must be a function make_config(values)")
        if not callable(getattr(obj, "train", None)):
            raise WorkloadError(f"workload {self.name!r}: train must be a function train(config, context)")
        _check_train(self.name, obj.train)
        if not isinstance(obj.metrics, dict) or not obj.metrics:
            raise WorkloadError(f"workload {self.name!r}: metrics must map metric names to \"higher\" or \"lower\"")
        self.own_fields = tuple(defaults)
        self._types = field_types(given, defaults)
        self.defaults = {**{k: None for k in PLUMBING}, **defaults}
        self.fields = tuple(self.defaults)
        rows, self.margins = _rows(obj.metrics)
        self.metrics = _Metrics(rows)
        roles = getattr(obj, "roles", {}) or {}
        bad = {k: v for k, v in roles.items() if k not in self.fields or v not in ROLES}
        if bad:
            raise WorkloadError(f"workload {self.name!r}: roles: {next(iter(bad))!r} is not a config field with a "
                                f"role among {', '.join(ROLES)}")
        self._roles = {**{k: "plumbing" for k in PLUMBING}, **roles}

    # ---- the interface, each part the object's own where it has one, else its default
    def config(self, values: dict) -> ConfigView:
        """The config of a spec's values: each checked against its field's type, built by the
        workload's `make_config` where it resolves its settings as a whole (DSpark: a preset
        sets many fields) and read back field by field, else its defaults with the values."""
        unknown = sorted(set(values) - set(self.fields))
        if unknown:
            raise ValueError(f"unknown config field {unknown[0]!r}")
        for k, v in values.items():
            wrong = type_problem(k, v, self._types.get(k))
            if wrong:
                raise ValueError(wrong)
        if self._make is None:
            view = ConfigView(self, {**self.defaults, **values})
            if self.native_config is not None:
                view.native()  # the dataclass's own checks (__post_init__), one line
            return view
        native = self.build({k: v for k, v in values.items() if k in self.own_fields})
        engine = {k: v for k, v in values.items() if k not in self.own_fields}
        return ConfigView(self, {**self.defaults, **engine, **plain_values(native, self.own_fields)}, native)

    def build(self, values: dict):
        """The workload's own config of its own fields' values, one line on error."""
        try:
            if self._make is not None:
                return self._make(dict(values))
            return self.native_config(**values) if self.native_config is not None else dict(values)
        except (TypeError, ValueError) as e:
            raise ValueError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None

    def role(self, field: str) -> str:
        return self._roles.get(field, "objective")

    def has(self, part: str) -> bool:
        """Whether the workload has an optional part: "smoke", "checkpoints", "reeval", "timing",
        "shared", "objective"."""
        return {"smoke": "smoke" in self._hooks, "checkpoints": bool(self.checkpoint_file),
                "reeval": "reevaluate" in self._hooks, "timing": self.timing is not None,
                "shared": self.shared is not None, "objective": "objective" in self._hooks}[part]

    def smoke(self) -> dict:
        if not self.has("smoke"):
            raise ValueError(f"--smoke-test: workload {self.name!r} declares no smoke settings (a `smoke()` giving the "
                             "overrides that make a trial seconds long)")
        return self._hooks["smoke"]()

    def hook(self, name: str, default, *args):
        """The workload's optional function `name` (`HOOKS`) called with `args`, or `default`
        where it has none."""
        return self._hooks[name](*args) if name in self._hooks else default

    def variant(self, cfg) -> str:
        return self.hook("variant", "", own(cfg))

    def unmeasured(self, cfg, name: str) -> str | None:
        return self.hook("unmeasured", None, own(cfg), name)

    def config_problems(self, cfg) -> list[str]:
        return self.hook("config_problems", [], own(cfg))

    def checkpoint_bytes(self, cfg) -> int:
        return self.hook("checkpoint_bytes", 0, own(cfg))

    def checkpoint_problem(self, folder) -> str | None:
        return self.hook("checkpoint_problem", None, folder)

    def finished_problem(self, folder, cfg) -> str | None:
        return self.hook("finished_problem", None, folder, own(cfg))

    def reeval_problem(self, cfg, counts: dict[str, int]) -> str | None:
        if not self.has("reeval"):
            return f"workload {self.name!r} has no re-evaluation (a `reevaluate` of a finished trial's checkpoint)"
        return self.hook("reeval_problem", None, own(cfg), dict(counts))

    def reevaluate(self, cfg, checkpoint, counts: dict[str, int]) -> tuple[dict, dict[str, bytes]]:
        """(metrics with the items' columns, files) of the workload's (metrics, files[, items])."""
        got = self._hooks["reevaluate"](cfg, checkpoint, dict(counts))
        if not isinstance(got, (tuple, list)) or len(got) not in (2, 3):
            raise WorkloadError(f"workload {self.name!r}: reevaluate returned {str(got)[:60]!r}, not (metrics, "
                                "files) or (metrics, files, items)")
        metrics, files, items = got if len(got) == 3 else (*got, None)
        if items and isinstance(metrics, dict):
            metrics = {**metrics, **encode_items(items, metrics)}
        bad = [n for n in (files or {}) if not isinstance(n, str) or not FILE_NAME.fullmatch(n)]
        if bad:
            raise WorkloadError(f"workload {self.name!r}: reevaluate returned the file name {bad[0]!r}: a plain "
                                "name (letters, digits, . _ -), kept under the run's eval/")
        return dict(metrics), dict(files or {})

    def train(self, cfg, context: TrainContext | None = None):
        """One trial: the workload's `train(config, context)` with its own config, and the
        replicate's seed set where its config has none."""
        if "seed" not in self.own_fields and cfg.seed is not None:
            _seed_everything(int(cfg.seed))
        return self.obj.train(cfg.native(), context if context is not None else TrainContext())


class TrainContext:
    """What a trial's `train(config, context)` is given, beside its config.

    Calling it reports: `context(metrics[, checkpoint_dir][, items={response: values}])`, so
    that a `train(config, report)` reads it as its report. A report gets a `step` (1, 2, ...)
    where it gives none (the store logs a metric once per step), and its items become their
    columns (`trials.store.items`; items it cannot take fail the trial, naming the response).
    `resume_from` is the checkpoint folder a stopped trial continues from (None: it starts),
    and `before_step(step, resumed)` is called by a workload with checkpoints before each
    training step (the reliability tests crash a trial there; by default it does nothing)."""

    __slots__ = ("_report", "_reports", "resume_from", "before_step")

    def __init__(self, report=None, resume_from: str | None = None, before_step=None):
        self._report = report
        self._reports = 0
        self.resume_from = resume_from
        self.before_step = before_step if before_step is not None else _nothing

    def __call__(self, metrics: dict, checkpoint_dir: str | None = None, items: dict | None = None) -> None:
        self._reports += 1
        metrics = {"step": self._reports, **metrics} if "step" not in metrics else dict(metrics)
        if items:
            metrics.update(encode_items(items, metrics))  # ValueError naming the response: the trial fails
        if self._report is not None:
            self._report(metrics, checkpoint_dir)


def _nothing(*_args) -> None:
    return None


def _check_train(name: str, train) -> None:
    """`train` is a function of (config, context), checked once as the workload loads; one that
    names a part of the context as its own parameter would never be given it, so it is refused."""
    try:
        takes = inspect.signature(train)
    except ValueError:
        return  # no signature to read (a builtin): found when called
    try:
        takes.bind(None, None)
    except TypeError:
        raise WorkloadError(f"workload {name!r}: train must take (config, context); its signature is "
                            f"train{takes}") from None
    named = [k for k in TRAIN_CONTEXT if k in takes.parameters]
    if named:
        raise WorkloadError(f"workload {name!r}: train's parameter {named[0]!r} is never given: it is "
                            f"`context.{named[0]}` of train(config, context)")


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2 ** 32)
    except ImportError:
        pass
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:
        pass
