"""What a workload gives the engine: the one interface between `trials` (and `analysis`) and
the trainer being swept. A workload need not import this module (DSpark's,
`dspark.workload.WORKLOAD`, does not: the layers import one way). A spec names it
(`workload: dspark`, the default, or `package.module:object`), and `load_workload` returns it, once,
with every optional part filled by its default (`trials.workload_defaults.Loaded`); the engine and the
statistics take that object, never a name.

Required, four attributes (a whole example: `examples/mlp_sweep.py`, 40 lines):

    name       str: the workload's name
    config     a dataclass (its fields and their defaults) or a dict of defaults
    train      train(config, context) -> None: one trial, `config` an instance of that
               dataclass (or a dict); calling the context reports (so that it reads as
               `train(config, report)`): `report(metrics)` after each evaluation, or
               `report(metrics, checkpoint_dir)` where it saves a checkpoint there;
               `report(metrics, items={response: per-item values})` hands over the
               evaluation's items too, from which the statistics split a response's
               noise into the seeds' part and the items' (their mean is the response; a
               response that is no mean: {"items": n, "without": [the response
               recomputed without each group]}; `trials.store.items`). The store keeps them as
               one artifact per run, `items.json`, not as metrics, and with them an
               evaluation's own counts, reported as `split/<name>` metrics (the prompts
               or batches it read: what a re-evaluation or a plan scales)
    metrics    {metric: "higher" | "lower"}, or {metric: {"better": ..., "margin": ...,
               "unit": ...}}: a metric with a margin is a primary response where a spec
               declares none

    >>> class MLP:
    ...     name, config = "mlp", {"lr": 0.01, "steps": 100}
    ...     metrics = {"val/loss": {"better": "lower", "margin": 0.01}}
    ...     def train(self, config, report):
    ...         report({"val/loss": 1.0 / config["steps"]})

Optional, each with its default where absent (DSpark's `dspark.workload` and the tests' toy
use them through the same door as any workload: nothing else is looked for):

    roles                {field: role}: "objective" (default), "budget", "evaluation",
                         "target" or "plumbing" (changes no result; `seed` and `out_dir` are,
                         by default)
    make_config(values)  the workload's own config of a spec's values, where its settings
                         resolve as a whole (DSpark: a preset sets many fields); read back field
                         by field (default: the dataclass, or dict, of its defaults and values)
    objective(config)    what a run's results depend on, to find levels that train the same
                         thing (default: every field but the plumbing)
    metric_rows          registry rows richer than `metrics` (`lookup(name)`, `REGISTRY`,
                         `DEFAULT_RESPONSES`: which variants measure a metric, where it is
                         degenerate or constant, headline, timed; `trials/registry.py`); each
                         name of `metrics` needs a row (default: a row per `metrics` entry)
    variant(config), variant_field
                         which row set of the registry a trial measures (default: one)
    unmeasured(config, name), config_problems(config)
                         more checks of a spec (default: none)
    sequential_fields    {max_<kind>: config field}: the evaluation maxima a spec's
                         `sequential:` plan may declare (say {"max_prompts": "n_prompts"}:
                         the most prompts a re-evaluation may reach, at least the trials'
                         n_prompts; <kind> is the evaluation's count, `split/<kind>`;
                         default: none, a plan caps blocks alone)
    smoke()              the overrides that make a trial seconds long (`--smoke-test`;
                         default: none, and the flag says so)
    checkpoint_file, final_checkpoint, checkpoint_bytes(config), checkpoint_problem(folder),
    finished_problem(folder, config)
                         checkpoints: a stopped trial continues from the folder
                         `context.resume_from`, calling `context.before_step(step, resumed)`
                         before each step (default: none, a stopped trial starts again)
    shared               artifacts trained once per sweep (`SharedArtifacts`; default: none)
    reeval_counts, reevaluate(config, checkpoint, counts), reeval_problem(config, counts)
                         `trials reeval NAME --FIELD N`: the final evaluation again, from a
                         finished trial's checkpoint, on more items. `reeval_counts` =
                         {config field: what it counts}, the fields a re-evaluation raises;
                         `reeval_limits` = {field: the most it may be} (default: COUNT_LIMIT)
                         (say {"n_prompts": "prompts"}); the row of the count each raises
                         names it, `raised_by`, so that a plan prints the command, and
                         what one item costs a run, `item_seconds`; `reevaluate` gets {field: n}
                         for the counts that trial still needs (one it was already
                         evaluated with is left out),
                         `reeval_problem` every count asked; `reevaluate` returns (metrics,
                         {plain file name: bytes}[, items as `report` takes them]), the files
                         kept under the run's `eval/`
                         (default: none, and the command says so)
    timing               the interleaved timing pass (`TimingHooks`; default: none, and
                         `trials time` says so)
    questions            {variant: the question a sweep of it answers} (default: none)
    notebooks            a folder of Jupyter notebooks about its own metrics, which
                         `analysis notebook NAME EXPERIMENT` runs on a sweep of it as it runs
                         the engine's (default: none, the engine's alone)

Every hook gets the workload's own config (an instance of its dataclass, what `make_config`
built, or a dict). Where a workload's config has no `seed` field, the replicate's seed seeds
Python's, NumPy's and torch's generators before `train`.

No code runs from data. A workload is imported only where the user names it: on the command
line or in the spec file they pass (`trials run`, `validate`: trusted), or as an installed
plug-in, an entry point of the group `dspark_sweeps.workloads` (the packaging convention;
this distribution declares `dspark` there), a path listed in the environment variable
DSPARK_SWEEPS_WORKLOADS (comma-separated; the user's own choice, as a command line is), or
one this user ran themselves: a path given on the command line or in a spec file is kept in
the user's own list (`$XDG_CONFIG_HOME/dspark-sweeps/workloads`, else `~/.config/...`; read
only where the user owns it and no one else may write it) with the file it was imported
from, so that their later `resume`, `status` and `report` of that sweep find it, from that
file alone: a same-named module elsewhere (a folder received from someone) is refused. A name read back from storage (a saved spec,
the parent run's `workload` tag, a parquet export) is matched against those and never
imported on its own say-so: an unknown one is refused in one line naming it and how to allow
it. Whatever importing a workload raises or does (an error, `sys.exit`) ends in one line
naming it.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from pathlib import Path
from importlib.metadata import entry_points
from typing import Any, Protocol

from .workload_defaults import Loaded, WorkloadError

DEFAULT = "dspark"
BUILTIN = {"dspark": "dspark.workload:WORKLOAD"}  # known without installed metadata (a source checkout)
GROUP = "dspark_sweeps.workloads"  # the entry point group of installed workloads
TRUST_ENV = "DSPARK_SWEEPS_WORKLOADS"  # comma-separated `package.module:object` paths the user allows
SHOWN = 120  # characters of a workload's name a message quotes


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
    size: dict[str, str]  # variant -> what one repetition holds: "prompts" or "steps" (`--prompts N`, `--steps N`)

    def needs_checkpoints(self, variant: str) -> bool: ...

    def arms(self, variant: str, configs: dict, checkpoints: dict, settings: Any, tmp: str) -> Any: ...

    def values(self, variant: str, rounds: list[dict]) -> dict[str, float]: ...

    def items(self, variant: str, rounds: list[dict]) -> dict[str, dict]:
        """run key -> its items from the pass ({response: per-item values, or {"items": n,
        "without": [...]}}, as `report(..., items=)` takes them); {} where it has none."""


def installed() -> dict[str, str]:
    """Short name -> `package.module:object` of every workload this machine allows by name:
    the built-in ones and the installed entry points of GROUP."""
    out = dict(BUILTIN)
    try:
        out.update({ep.name: ep.value for ep in entry_points(group=GROUP)})
    except Exception:  # broken metadata of some other distribution: the built-in ones still load
        pass
    return out


def allowed() -> set[str]:
    """The paths the user allows by name (TRUST_ENV), and the ones they ran (`ran_file`: each
    allowed only from the file it was run from), besides the installed ones."""
    return _env_allowed() | set(_ran())


def _env_allowed() -> set[str]:
    return {p.strip() for p in os.environ.get(TRUST_ENV, "").split(",") if p.strip()}


def ran_file() -> Path:
    """The user's own list of the workload paths they ran (one a line)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "dspark-sweeps" / "workloads"


def _ran() -> dict[str, str]:
    """{path: the file it was run from} of the user's list ("" where a line kept no file); the
    last line of a path counts."""
    path = ran_file()
    try:
        st = path.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:  # someone else could have written it: not the user's word
            return {}
        lines = [line.strip().partition("\t") for line in path.read_text().splitlines()[-1000:] if line.strip()]
        return {name: where for name, _, where in lines}
    except (OSError, UnicodeDecodeError):
        return {}


def _remember(path: str, where: str) -> None:
    """Keep a path the user ran, with the file it was imported from, in their own list (best
    effort: a read-only home just means the next command from storage asks for TRUST_ENV)."""
    if _ran().get(path) == where:
        return
    try:
        f = ran_file()
        f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(f, "a") as out:
            out.write(f"{path}\t{where}\n")
        os.chmod(f, 0o600)
    except OSError:
        pass


def module_file(module: str) -> str:
    """The file `module` would be imported from, found without running any of it (no parent
    package's __init__ either): the module already imported, else the import path's finder."""
    from importlib.machinery import PathFinder

    if module in sys.modules:
        return str(Path(getattr(sys.modules[module], "__file__", "") or "").resolve())
    locations, spec = None, None
    for i, part in enumerate(module.split(".")):
        spec = PathFinder.find_spec(".".join(module.split(".")[:i + 1]), locations)
        if spec is None:
            return ""
        locations = spec.submodule_search_locations
    return str(Path(spec.origin).resolve()) if spec is not None and spec.origin else ""


def _same_file(name: str, path: str) -> None:
    """A path read back from storage that the user ran is imported only from the file they
    ran it from: a same-named module elsewhere (a received folder's) is refused in one line."""
    ran = _ran().get(path)
    if ran is None or path in _env_allowed():
        return
    here = module_file(path.partition(":")[0])
    if not ran or here != ran:
        raise WorkloadError(
            f"workload: {shown(name)} is recorded with this sweep; you ran it from "
            f"{ran or 'a file not kept then'}, but here it would be imported from {here or 'nowhere'}, so it is not "
            f"imported: run from the folder that holds yours (or run its spec once from there), or set "
            f"{TRUST_ENV}={path[:SHOWN]}")


_trusted: set[str] = set()  # names this process has loaded from the user's own command or spec


def shown(name: str) -> str:
    return repr(name if len(name) <= SHOWN else name[:SHOWN] + "...")


def load_workload(name: str = DEFAULT, trusted: bool = False) -> Loaded:
    """The workload named, loaded once with its defaults filled (`trials.workload_defaults.Loaded`).

    Args:
        name: an installed short name (`dspark`), or `package.module:object`.
        trusted: the name comes from the user (their command line or spec file): it may be
            imported by path. Otherwise (a name read back from storage) it is imported only
            where installed, allowed by TRUST_ENV, or trusted before in this process.

    Returns:
        The loaded workload. Raises WorkloadError, in one line, for anything else and for
        whatever importing it does.

    Example:
        >>> load_workload("dspark").name
        'dspark'
    """
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"workload: a workload's name or `package.module:object`, got {shown(str(name))}")
    known = installed()
    path = known.get(name, name)
    if not (trusted or name in known or path in known.values() or path in allowed() or path in _trusted):
        raise WorkloadError(
            f"workload: {shown(name)} is recorded with this sweep but is not an installed workload "
            f"({', '.join(sorted(known))}), so it is not imported on the record's say-so; allow it by installing it "
            f"as an entry point of the group {GROUP} or by setting {TRUST_ENV}={path[:SHOWN]}")
    if path not in known.values():
        _beside_here()
        if not (trusted or path in _trusted):
            _same_file(name, path)
    found = _import(name, path, tuple(sorted(known)))
    if trusted:
        _trusted.add(path)
        if path not in known.values():
            _remember(path, module_file(path.partition(":")[0]))
    return found


def _beside_here() -> None:
    """A `package.module:object` is found in the current folder too, as `python -m` finds one
    (after the installed packages). A local Ray's workers find it there as well: Ray puts the
    driver's current folder on their import path (on a cluster, the workload's package must be
    installed on every node)."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.append(here)


@functools.lru_cache(maxsize=None)
def _import(name: str, path: str, known: tuple[str, ...]) -> Loaded:
    module, _, attr = path.partition(":")
    if not module or not attr or module.startswith("."):
        raise WorkloadError(f"workload: {shown(name)} is neither an installed workload ({', '.join(known)}) "
                            "nor an absolute `package.module:object` path")
    try:
        found = getattr(importlib.import_module(module), attr)
    except ImportError as e:
        raise WorkloadError(f"workload: {shown(name)}: cannot import {module[:SHOWN]} "
                            f"({str(e).splitlines()[0][:200] if str(e) else type(e).__name__})") from None
    except AttributeError:
        raise WorkloadError(f"workload: {shown(name)}: {module[:SHOWN]} has no {attr[:SHOWN]!r}") from None
    except SystemExit as e:
        raise WorkloadError(f"workload: {shown(name)}: importing {module[:SHOWN]} called sys.exit({e.code!r})") from None
    except Exception as e:  # a module that raises at import, a syntax error in it
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        raise WorkloadError(f"workload: {shown(name)}: importing {module[:SHOWN]} raised {type(e).__name__}{where}: "
                            f"{str(e).splitlines()[0][:200] if str(e) else ''}") from None
    try:
        return Loaded(found, name)
    except WorkloadError as e:
        raise WorkloadError(f"workload: {shown(name)}: {e}") from None


