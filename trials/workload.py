"""What a workload gives the engine: the one interface between `trials` (and `analysis`) and
the trainer being swept.

A workload is any object with the attributes below; it need not import this module (DSpark's,
`dspark.workload.WORKLOAD`, does not: the layers import one way). A spec names its workload
(`workload: dspark`, the default, or `package.module:object` for any other), and the engine
loads it here, by name, in the driver and in every Ray worker.

    name                          the workload's name, as specs and the sweep's record give it
    fields                        every config field, in order
    config(values) -> config      a validated config from {field: value} (ValueError, one
                                  line, naming the field); a config is frozen and has
                                  `to_dict()` and `replace(**fields)`
    role(field) -> str            "objective", "budget", "evaluation" or "plumbing" (plumbing
                                  changes no number: a factor that moves only plumbing is dead)
    smoke() -> dict               the overrides that make any config a seconds-long smoke test
    variant(config) -> str        which row set of the registry a trial measures (DSpark: its
                                  parallel stage); `variant_field` names the config field
    metrics                       the metric registry (`trials.registry`'s rows: `REGISTRY`,
                                  `lookup(name)`, `DEFAULT_RESPONSES` by variant)
    unmeasured(config, name)      why an arm cannot give a response beyond what the registry
                                  says of its variant (None: nothing more)
    config_problems(config)       what a config names that is not there (a file it reads)
    sequential_fields             a sequential plan's caps -> the config fields they cap
                                  ({"max_prompts": "spec_prompts", ...})
    train(config, report, resume_from=None, before_step=None) -> dict
                                  one trial: `report(metrics, checkpoint_dir)` after each
                                  evaluation; returns the final metrics
    checkpoint_file               the file every checkpoint folder holds
    final_checkpoint              the folder under a config's `out_dir` that holds the last one
    checkpoint_bytes(config)      about the size of one checkpoint (storage is checked for it)
    checkpoint_problem(folder)    why a checkpoint folder is not intact (None: it is)
    finished_problem(folder, config)
                                  why it is not a finished trial's, loadable with this config
    shared                        artifacts trained once per sweep and shared by its trials,
                                  or None (see `SharedArtifacts` below)
    reeval_problem(config, n_prompts, n_batches)
                                  why `trials reeval` cannot re-evaluate such a trial so (None: it can)
    reevaluate(config, checkpoint, n_prompts, n_batches) -> (metrics, per_prompt, rounds)
                                  a finished trial's checkpoint evaluated on more items
    eval_files                    the artifact names of `reevaluate`'s per-prompt and rounds files
    timing                        the timing pass's hooks, or None (see `TimingHooks`)
    questions                     variant -> the question a sweep of that variant answers
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Protocol, runtime_checkable

from .registry import Registry

DEFAULT = "dspark"
BUILTIN = {"dspark": "dspark.workload:WORKLOAD"}  # the workloads the engine knows by a short name
REQUIRED = ("name", "fields", "config", "role", "smoke", "variant", "variant_field", "metrics", "unmeasured",
            "sequential_fields", "config_problems", "train", "checkpoint_file", "final_checkpoint", "checkpoint_bytes",
            "checkpoint_problem", "finished_problem", "shared", "reeval_problem", "reevaluate", "eval_files", "timing",
            "questions")


class SharedArtifacts(Protocol):
    """What a sweep trains once and its trials share (DSpark: the frozen target LM)."""

    def address(self, config: Any, cache: dict) -> tuple[str, dict[str, str]]:
        """(the artifact's content hash, the trial's tags naming it) of a config."""

    def needed(self, config: Any) -> bool:
        """Whether this trial uses a shared artifact the sweep trains."""

    def file(self, storage: Any, key: str) -> Any:
        """Where the artifact `key` lies in storage."""

    def read(self, path: Any) -> dict:
        """The artifact's metadata (ValueError, one line, where it is not intact)."""

    def train(self, config: dict, path: str, progress_file: str | None) -> dict:
        """Train it into `path` (in a Ray task), writing progress to `progress_file`."""

    def describe(self, config: Any) -> str:
        """A few words on what training it is, for the driver's line."""

    def bind(self, config: Any, path: str) -> Any:
        """The config pointed at the trained artifact."""


class TimingHooks(Protocol):
    """The interleaved timing pass's workload part (`trials time`)."""
    response: dict[str, str]  # variant -> the timed response
    size: dict[str, str]  # variant -> what one repetition holds ("prompts", "steps")

    def needs_checkpoints(self, variant: str) -> bool: ...

    def arms(self, variant: str, configs: dict, checkpoints: dict, settings: Any, tmp: str) -> Any: ...

    def values(self, variant: str, rounds: list[dict]) -> dict[str, float]: ...

    def jack_values(self, variant: str, rounds: list[dict]) -> dict[str, dict[str, float]]: ...


@runtime_checkable
class Workload(Protocol):
    name: str
    fields: tuple[str, ...]
    variant_field: str
    metrics: Any
    sequential_fields: dict[str, str]
    checkpoint_file: str
    final_checkpoint: str
    shared: SharedArtifacts | None
    eval_files: tuple[str, str]
    timing: TimingHooks | None
    questions: dict[str, str]
    config: Callable[[dict], Any]
    role: Callable[[str], str]
    smoke: Callable[[], dict]
    variant: Callable[[Any], str]
    unmeasured: Callable[[Any, str], str | None]
    config_problems: Callable[[Any], list[str]]
    train: Callable[..., dict]
    checkpoint_bytes: Callable[[Any], int]
    checkpoint_problem: Callable[[Any], str | None]
    finished_problem: Callable[[Any, Any], str | None]
    reeval_problem: Callable[..., str | None]
    reevaluate: Callable[..., tuple]


class WorkloadError(ValueError):
    """A workload that cannot be loaded, or lacks part of the interface (one line)."""


@functools.lru_cache(maxsize=None)
def load(name: str = DEFAULT) -> Workload:
    """The workload a spec names: a short name the engine knows, or `package.module:object`."""
    path = BUILTIN.get(name, name)
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise WorkloadError(f"workload: {name!r} is neither a known workload ({', '.join(BUILTIN)}) "
                            "nor a `package.module:object` path")
    try:
        found = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise WorkloadError(f"workload: {name!r}: cannot import {module} ({e})") from None
    except AttributeError:
        raise WorkloadError(f"workload: {name!r}: {module} has no {attr!r}") from None
    missing = [a for a in REQUIRED if not hasattr(found, a)]
    if missing:
        raise WorkloadError(f"workload: {name!r} lacks {', '.join(missing)} (see trials/workload.py)")
    return found


def registry(name: str = DEFAULT) -> Registry:
    """The rules over a workload's metric registry (`trials.registry.Registry`)."""
    wl = load(name)
    return Registry(wl.metrics, wl.variant_field)
