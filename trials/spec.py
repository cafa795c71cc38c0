"""Sweep specs: YAML in, a validated factorial design of trials out.

```yaml
name: d1-d2-d9
base: {preset: tiny, parallel_stage: drafter, block_size: 7}
factors:
  D1: {shifted: {window: shifted}, aligned: {window: aligned}}
  D2: {const4: {decay_gamma: 4.0}, block: {decay_gamma: block}}
replicates: 3                       # seeds per cell
design: full                        # or {generators: {D: ABC}} for a 2^(k-p) fraction
controls: {aux0: {aux_weight: 0.0}} # optional extra arms outside the factorial
responses:                          # the primary responses, each with its margin
  spec/tau: {better: higher, margin: 0.1}
primary_terms: [D1, D2, aux0]       # the family's terms (default: every main effect and control)
sequential: {max_replicates: 6}     # looks planned before the first one (alpha 0.05 unless given)
resources: {cpu: 1, gpu: 0}         # per trial
max_concurrent: 2
max_failures: 2
```

Each factor maps level names to trainer-config overrides. A fraction's generated factor
takes, in every run, the product of the coded levels (-1 = first level listed, +1 = the
second) of the factors in its generator. A primary response's margin is the smallest
effect of practical interest: the analysis calls a term negligible only where equivalence
within +-margin is shown. The family of verdicts is primary responses x primary terms; other
terms and responses are reported at the same alpha, outside the family. A sequential plan
declared here is recorded on the sweep's parent run at `trials run`, before any look, so
that every later look spends alpha on it (`analysis.sequential`). Seeds come from (sweep name, replicate), so every
cell of one replicate shares its seed (a blocked design) and a rerun reproduces.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import workload as workloads
from .registry import PRIMARY_FORM, Registry
from trials.store.keys import ARM_TAG, CELL_TAG, FACTOR_PREFIX, REPLICATE_TAG, RUN_ORDER_TAG, SEED_TAG, TRIAL_KEY_TAG

TOP_KEYS = {"workload", "name", "base", "factors", "replicates", "design", "controls", "resources",
            "max_concurrent", "max_failures", "description", "responses", "primary_terms", "sequential"}
SEQUENTIAL_KEYS = {"max_replicates", "alpha", "max_prompts", "max_eval_batches"}
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
MAX_SPEC_BYTES = 1_000_000  # a spec file larger than this is not a spec
MAX_YAML_NODES = 100_000  # the spec's YAML with every alias expanded (refuses alias bombs)


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
        the levels in factor order, then the replicate (the full cell is the `cell` tag)."""
        if self.arm.startswith("control:"):
            return f"control {self.arm.split(':', 1)[1]} r{self.replicate}"
        return f"{'·'.join(self.levels.values())} r{self.replicate}"


@dataclass
class SweepSpec:
    name: str
    base: dict[str, Any]
    factors: dict[str, dict[str, dict[str, Any]]]
    workload: str = workloads.DEFAULT  # the trainer swept (`trials.workload.load`)
    replicates: int = 1
    generators: dict[str, list[str]] = field(default_factory=dict)  # empty = full factorial
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=lambda: {"cpu": 1, "gpu": 0})
    max_concurrent: int = 0  # 0 = as many as resources allow
    max_failures: int = 2
    description: str = ""
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)  # primary: {better, margin}
    primary_terms: list[str] = field(default_factory=list)  # [] = every main effect and control
    sequential: dict[str, Any] = field(default_factory=dict)  # {max_replicates, alpha, ...}; {} = no plan
    trials: list[Trial] = field(default_factory=list)

    @property
    def wl(self) -> workloads.Workload:
        return workloads.load(self.workload)

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

    def override(self, **changes: Any) -> "SweepSpec":
        """The same design with every trial's config changed (e.g. a smoke test)."""
        return build(dataclasses.replace(self, base={**self.base, **changes}, trials=[]))


def same_design(a: SweepSpec, b: SweepSpec) -> bool:
    """Same trials with the same configs (what decides whether a sweep can be resumed)."""
    def sig(s):
        return sorted((t.key, repr(sorted(t.config.to_dict().items()))) for t in s.trials)
    return a.name == b.name and sig(a) == sig(b)


def extends(old: SweepSpec, new: SweepSpec) -> bool:
    """`new` holds every trial of `old` with the same config (it may add replicate blocks):
    what `trials augment` may run on top of a sweep already in storage."""
    mine = {t.key: repr(sorted(t.config.to_dict().items())) for t in new.trials}
    return old.name == new.name and all(
        mine.get(t.key) == repr(sorted(t.config.to_dict().items())) for t in old.trials)


def with_replicates(spec: SweepSpec, replicates: int) -> SweepSpec:
    """The same sweep with more replicate blocks: the existing trials unchanged, each new
    block with its own seed and its own randomised run order, launched after the others."""
    if replicates < spec.replicates:
        raise SpecError([f"replicates: {replicates} is fewer than the sweep's {spec.replicates}"])
    if (len({t.cell for t in spec.trials if t.replicate == 0})) * replicates > MAX_TRIALS:
        raise SpecError([f"replicates: {replicates} blocks would pass the {MAX_TRIALS} trials a sweep may hold"])
    return build(dataclasses.replace(spec, replicates=replicates, trials=[]))


def replicate_seed(sweep: str, replicate: int) -> int:
    digest = hashlib.sha256(f"{sweep}:{replicate}".encode()).digest()
    return int.from_bytes(digest[:4], "little") % (2 ** 31)


def _parse_generator(text: str, factors: list[str]) -> list[str] | None:
    text = str(text).strip()
    parts = [p for p in re.split(r"[*:·\s]+", text) if p]
    if len(parts) == 1 and parts[0] not in factors and all(ch in factors for ch in parts[0]):
        parts = list(parts[0])  # "ABC" with one-letter factor names
    return parts if all(p in factors for p in parts) else None


def _resolve(base: dict, *overrides: dict) -> dict:
    out = dict(base)
    for o in overrides:
        out.update(o)
    return out


def load(path: str | Path) -> SweepSpec:
    p = Path(path)
    if not p.is_file():
        raise SpecError([f"spec: {path} is not a file"])
    if p.stat().st_size > MAX_SPEC_BYTES:
        raise SpecError([f"spec: {path} is {p.stat().st_size} bytes; a spec may hold at most {MAX_SPEC_BYTES}"])
    try:
        text = p.read_text()
        raw = safe_yaml(text)
    except UnicodeDecodeError:
        raise SpecError([f"spec: {path} is not UTF-8 text"]) from None
    except yaml.YAMLError as e:
        raise SpecError([f"spec: {path} is not valid YAML ({str(e).splitlines()[0]})"]) from None
    except SpecError as e:
        raise SpecError([f"spec: {path}: {e}"]) from None
    return parse(raw)


def safe_yaml(text: str) -> Any:
    """`yaml.safe_load`, after counting the document's nodes with every alias expanded: an
    alias bomb (a few lines whose aliases nest to billions of nodes) is refused before
    anything walks it."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is None:
        return None
    sizes: dict[int, int] = {}

    def size(node) -> int:  # memoised on the node, so shared (aliased) nodes are counted cheaply
        if id(node) not in sizes:
            sizes[id(node)] = -1  # a recursive alias (a node that holds itself) counts as too big
            if isinstance(node, yaml.MappingNode):
                n = 1 + sum(size(k) + size(v) for k, v in node.value)
            elif isinstance(node, yaml.SequenceNode):
                n = 1 + sum(size(v) for v in node.value)
            else:
                n = 1
            sizes[id(node)] = n
        n = sizes[id(node)]
        return MAX_YAML_NODES + 1 if n < 0 else min(n, MAX_YAML_NODES + 1)

    if size(root) > MAX_YAML_NODES:
        raise SpecError([f"its YAML expands to more than {MAX_YAML_NODES} nodes (aliases nested too deep)"])
    return yaml.safe_load(text)


def parse(raw: Any) -> SweepSpec:
    """Validate a whole spec; raise SpecError listing every problem found, in every part
    of it and in the configs of its cells."""
    if not isinstance(raw, dict):
        raise SpecError(["spec: the top level must be a mapping"])
    problems: list[str] = [f"spec: unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})"
                           for key in sorted(set(raw) - TOP_KEYS)]
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"name: required; {NAME_RULE}")
    wl = _parse_workload(raw)
    fields = set(wl.fields)
    spec = SweepSpec(name=name if isinstance(name, str) else "", base=_parse_base(raw, fields, problems),
                     factors=_parse_factors(raw, fields, problems), workload=raw.get("workload", workloads.DEFAULT))
    spec.replicates = _parse_replicates(raw, spec.factors, problems)
    spec.generators = _parse_design(raw, spec.factors, problems)
    spec.controls = _parse_controls(raw, fields, problems)
    spec.resources = {"cpu": 1, "gpu": 0, **_parse_resources(raw, problems)}
    spec.max_concurrent = _count(raw, "max_concurrent", 0, problems)
    spec.max_failures = _count(raw, "max_failures", 2, problems)
    spec.description = str(raw.get("description", ""))
    spec.responses = _parse_responses(raw, workloads.registry(spec.workload), problems)
    spec.primary_terms = _parse_primary_terms(raw, spec.factors, spec.controls, problems)
    spec.sequential = _parse_sequential(raw, spec, problems)
    if problems:
        raise SpecError(problems + [p for p in _cell_problems(spec) if p not in problems])
    spec = build(spec)
    problems = unmeasured_responses(spec.responses, [t.config for t in spec.trials if t.arm == "factorial"], wl)
    problems += target_path_problems(spec) + sequential_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def _parse_workload(raw: dict) -> workloads.Workload:
    """The workload the spec names (the default where it names none); a name that does not
    load stops the check here, since every config field depends on it."""
    name = raw.get("workload", workloads.DEFAULT)
    if not isinstance(name, str) or not name:
        raise SpecError([f"workload: a workload's name or `package.module:object`, got {str(name)[:60]!r}"])
    try:
        return workloads.load(name)
    except workloads.WorkloadError as e:
        raise SpecError([str(e)]) from None


def target_path_problems(spec: SweepSpec) -> list[str]:
    """What the trials' configs name that is not there (DSpark: a `target_path` that is not
    a target it saved), checked now rather than when the first trial starts."""
    seen, out = set(), []
    for t in spec.trials:
        for problem in spec.wl.config_problems(t.config):
            if problem not in seen:
                seen.add(problem)
                out.append(problem)
    return out


def local_problems(spec: SweepSpec) -> list[str]:
    """What a local Ray on this machine could not give a trial: more cores or GPUs than it
    has, or a CUDA device where torch sees none."""
    import os

    cuda = sorted({t.cell for t in spec.trials if t.config.device == "cuda"})
    gpus = 0
    if cuda or spec.resources.get("gpu", 0) > 0:  # torch takes a second to import: only when asked
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    have = {"cpu": os.cpu_count() or 1, "gpu": gpus}
    out = []
    short = [f"{k}={spec.resources.get(k, 0):g}" for k in ("cpu", "gpu") if spec.resources.get(k, 0) > have[k]]
    if short:
        out.append(f"resources: a trial asks for {', '.join(short)}, which no node holds on this fixed Ray "
                   f"(this machine: cpu={have['cpu']}, gpu={have['gpu']})")
    if cuda and not gpus:
        out.append(f"device: cell {cuda[0]} asks for cuda, and torch sees no CUDA device on this machine "
                   "(run it on a cluster with --address, or use device: auto)")
    elif cuda and not spec.resources.get("gpu"):
        out.append(f"device: cell {cuda[0]} asks for cuda, but resources.gpu is 0, so Ray gives its trial no GPU")
    return out


def _parse_responses(raw: dict, registry, problems: list[str]) -> dict[str, dict[str, Any]]:
    """The primary responses: a known metric each, its better direction (the registry's,
    which a spec may state but not contradict) and a finite margin > 0
    (`Registry.primary_response`, which the analysis checks a recorded sweep with)."""
    given = raw.get("responses", {}) or {}
    if not isinstance(given, dict):
        problems.append(f"responses: must map metric names to {PRIMARY_FORM}")
        return {}
    clean = {}
    for name, decl in given.items():
        name = str(name)
        ok, problem = registry.primary_response(name, decl, f"responses.{name}")
        if problem:
            problems.append(problem)
        else:
            clean[name] = ok
    return clean


def _parse_primary_terms(raw: dict, factors: dict, controls: dict, problems: list[str]) -> list[str]:
    """The family's terms: factor names (a main effect; every pair of levels of a factor of
    more than two), interactions `A:B`, and control names (every factorial arm against it)."""
    given = raw.get("primary_terms")
    if given is None:
        return []
    if not isinstance(given, list) or not given or not all(isinstance(t, str) for t in given):
        problems.append("primary_terms: a non-empty list of factor names, interactions (A:B) and control names")
        return []
    clean = []
    for term in given:
        parts = term.split(":")
        if term in controls and term not in factors:
            clean.append(term)
        elif all(p in factors for p in parts) and len(set(parts)) == len(parts):
            clean.append(":".join(sorted(parts, key=list(factors).index)))
        else:
            problems.append(f"primary_terms: {term!r} is neither a factor, an interaction of distinct factors "
                            f"(A:B) nor a control (factors: {', '.join(factors)}; controls: "
                            f"{', '.join(controls) or 'none'})")
    if len(set(clean)) < len(clean):
        problems.append("primary_terms: a term is named twice")
    return clean


def _parse_sequential(raw: dict, spec: "SweepSpec", problems: list[str]) -> dict[str, Any]:
    """The sequential plan, declared before the first look: the most replicate blocks the
    sweep may grow to, its familywise alpha, and the most prompts (or held-out batches) a
    re-evaluation may reach, which fixes the information scale alpha is spent on."""
    given = raw.get("sequential")
    if given is None:
        return {}
    if not isinstance(given, dict) or set(given) - SEQUENTIAL_KEYS or "max_replicates" not in given:
        problems.append("sequential: {max_replicates: N, alpha: A, max_prompts: P, max_eval_batches: B} "
                        "(max_replicates required)")
        return {}
    out: dict[str, Any] = {}
    for key in ("max_replicates", "max_prompts", "max_eval_batches"):
        v = given.get(key)
        if v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"sequential.{key}: an integer >= 1, got {v!r}")
            continue
        out[key] = v
    reps = out.get("max_replicates")
    if reps is not None and (reps < 2 or reps < spec.replicates):
        problems.append(f"sequential.max_replicates: at least 2 and at least the sweep's {spec.replicates} "
                        f"replicates, got {reps}")
    alpha = given.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        problems.append(f"sequential.alpha: a number in (0, 1), got {alpha!r}")
    else:
        out["alpha"] = float(alpha)
    if not spec.responses:
        problems.append("sequential: a plan needs primary responses with margins (responses:) to decide")
    return out


def sequential_problems(spec: "SweepSpec") -> list[str]:
    """A plan's evaluation maxima below what the sweep's trials already evaluate."""
    out = []
    for key, field_name in spec.wl.sequential_fields.items():
        now = max((getattr(t.config, field_name) for t in spec.trials), default=0)
        if key in spec.sequential and spec.sequential[key] < now:
            out.append(f"sequential.{key}: {spec.sequential[key]} is fewer than the trials' {field_name} ({now})")
    return out


def unmeasured_responses(responses: dict, configs: list, wl: workloads.Workload) -> list[str]:
    """Primary responses that some factorial arm cannot measure: not measured, degenerate or
    constant in its variant (the registry), or what the workload says it cannot give (DSpark:
    a decoding response where no prompt is decoded)."""
    registry = Registry(wl.metrics)
    out = []
    for name in responses:
        for cfg in configs:
            why = registry.unmeasured_reason(wl.variant(cfg), name) or wl.unmeasured(cfg, name)
            if why:
                out.append(f"responses.{name}: cannot be a primary response here: {why}")
                break
    return out


def _parse_base(raw: dict, fields: set[str], problems: list[str]) -> dict:
    base = raw.get("base", {})
    if not isinstance(base, dict):
        problems.append("base: must be a mapping of trainer config fields")
        return {}
    problems += [f"base: unknown trainer config field {key!r}" for key in sorted(set(base) - fields)]
    return base


def _parse_factors(raw: dict, fields: set[str], problems: list[str]) -> dict[str, dict[str, dict]]:
    factors = raw.get("factors")
    if not isinstance(factors, dict) or not factors:
        problems.append("factors: required, a mapping of factor -> {level: {overrides}}")
        return {}
    clean: dict[str, dict[str, dict]] = {}
    for fname, levels in factors.items():
        fname = str(fname)
        if not NAME_RE.match(fname):
            problems.append(f"factors.{fname[:80]}: a factor name must be {NAME_RULE}")
        elif fname in RESERVED_NAMES:
            problems.append(f"factors.{fname}: {fname!r} is reserved (a column every run has, or the "
                            f"control arms' cell); call the factor something else "
                            f"(reserved: {', '.join(RESERVED_NAMES)})")
        if not isinstance(levels, dict) or len(levels) < 2:
            problems.append(f"factors.{fname}: needs at least two levels, each mapping to config overrides")
            continue
        clean[fname] = {}
        for lname, over in levels.items():
            over = over or {}
            if isinstance(lname, bool):
                problems.append(f"factors.{fname}.{lname}: YAML reads yes/no/on/off/true/false as a boolean; "
                                "quote the level name")
                continue
            lname = str(lname)  # YAML reads `4:` as an int
            if not NAME_RE.match(lname):
                problems.append(f"factors.{fname}.{str(lname)[:80]}: a level name must be {NAME_RULE}")
                continue
            if _overrides_ok(f"factors.{fname}.{lname}", over, fields, problems):
                clean[fname][lname] = over
    problems += clashing_factors(clean)
    return clean


def _parse_replicates(raw: dict, factors: dict, problems: list[str]) -> int:
    replicates = raw.get("replicates", 1)
    if not isinstance(replicates, int) or isinstance(replicates, bool) or replicates < 1:
        problems.append(f"replicates: must be an integer >= 1, got {replicates!r}")
        return 1
    n_arms = len(controls) if isinstance(controls := raw.get("controls") or {}, dict) else 0
    n_cells = math.prod(len(levels) for levels in factors.values())
    if (n_cells + n_arms) * replicates > MAX_TRIALS:  # checked before any trial is built
        problems.append(f"replicates: {n_cells} cells x {replicates} replicates = {n_cells * replicates} trials, "
                        f"more than the {MAX_TRIALS} a sweep may hold")
        return 1
    return replicates


def _parse_design(raw: dict, factors: dict, problems: list[str]) -> dict[str, list[str]]:
    design = raw.get("design", "full")
    if design == "full":
        return {}
    gens = design.get("generators") if isinstance(design, dict) and set(design) == {"generators"} else None
    if not isinstance(gens, dict) or not gens:
        problems.append("design: 'full' or {generators: {FACTOR: WORD}} (e.g. {generators: {D: ABC}})")
        return {}
    generators: dict[str, list[str]] = {}
    for g, word in gens.items():
        g = str(g)
        parts = _parse_generator(word, list(factors))
        if g not in factors:
            problems.append(f"design.generators: {g!r} is not a factor")
        elif parts is None:
            problems.append(f"design.generators.{g}: {word!r} names a factor that does not exist")
        elif g in parts:
            problems.append(f"design.generators.{g}: a factor cannot generate itself")
        else:
            generators[g] = parts
    for g, parts in generators.items():
        for f in [g, *parts]:
            if f in factors and len(factors[f]) != 2:
                problems.append(f"design: a fraction needs two-level factors; {f} has {len(factors[f])}")
        if any(p in generators for p in parts):
            problems.append(f"design.generators.{g}: generators must be made of basic (not generated) factors")
    if not problems:
        problems += _low_resolution(list(factors), generators)
    return generators


def defining_relation(generators: dict[str, list[str]]) -> set[frozenset]:
    """Every word of a fraction's defining relation (the products of its generator words)."""
    words = [frozenset([g, *parts]) for g, parts in generators.items()]
    relation: set[frozenset] = set()
    for r in range(1, len(words) + 1):
        for combo in itertools.combinations(words, r):
            w: frozenset = frozenset()
            for c in combo:
                w = w ^ c
            relation.add(w)
    return relation


def _low_resolution(names: list[str], generators: dict[str, list[str]]) -> list[str]:
    """A fraction below resolution III aliases two main effects with each other (a word of
    length 2) or a main effect with the mean (length 1): neither could be estimated."""
    out = []
    for w in sorted(defining_relation(generators), key=lambda w: (len(w), sorted(w))):
        if len(w) == 1:
            out.append(f"design.generators: the fraction holds {next(iter(w))} constant (I = {next(iter(w))}); "
                       "its effect cannot be estimated")
        elif len(w) == 2:
            a, b = sorted(w, key=names.index)
            out.append(f"design.generators: main effects {a} and {b} are aliased ({a} = {b}, resolution II); "
                       "choose generators whose words all have 3 or more factors")
    return out


def _parse_controls(raw: dict, fields: set[str], problems: list[str]) -> dict[str, dict]:
    controls = raw.get("controls", {}) or {}
    if not isinstance(controls, dict):
        problems.append("controls: must map control names to config overrides")
        return {}
    clean = {}
    for cname, over in controls.items():
        if not isinstance(cname, str) or not NAME_RE.match(cname):
            problems.append(f"controls.{str(cname)[:80]}: a control name must be {NAME_RULE}")
            continue
        if _overrides_ok(f"controls.{cname}", over, fields, problems):
            clean[cname] = over
    return clean


def _overrides_ok(where: str, over: Any, fields: set[str], problems: list[str]) -> bool:
    """A level's or a control's overrides: a mapping (else refused, and left out); every
    unknown field named."""
    if not isinstance(over, dict):
        problems.append(f"{where}: must map to config overrides")
        return False
    problems += [f"{where}: unknown trainer config field {key!r}" for key in sorted(set(over) - fields)]
    return True


def _parse_resources(raw: dict, problems: list[str]) -> dict[str, float]:
    resources = raw.get("resources", {"cpu": 1, "gpu": 0})
    if not isinstance(resources, dict) or set(resources) - {"cpu", "gpu"} or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                    for v in resources.values()):
        problems.append("resources: a mapping with cpu and/or gpu counts >= 0")
        return {}
    if resources.get("cpu", 1) < 1:
        problems.append(f"resources: cpu must be at least 1 (a trial trains on it), got {resources['cpu']!r}")
    return resources


def _count(raw: dict, key: str, default: int, problems: list[str]) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        problems.append(f"{key}: must be an integer >= 0, got {value!r}")
        return default
    return value


def _cell_problems(spec: SweepSpec) -> list[str]:
    """Every stage is checked: the cells are resolved from what is valid so far, so the
    problems of their configs are listed with the spec's own."""
    known = set(spec.wl.fields)
    factors = {f: {lv: {k: v for k, v in over.items() if k in known} for lv, over in levels.items()}
               for f, levels in spec.factors.items() if len(levels) >= 2}
    if not factors or clashing_factors(factors):
        return []
    check = SweepSpec(name="check", workload=spec.workload, factors=factors,
                      base={k: v for k, v in spec.base.items() if k in known},
                      controls={c: {k: v for k, v in over.items() if k in known} for c, over in spec.controls.items()})
    try:
        _resolve_arms(check)
    except SpecError as e:
        return e.problems
    return []


def clashing_factors(factors: dict[str, dict[str, dict]]) -> list[str]:
    """Two factors that write the same config key: in every cell the later one would
    silently override the earlier, so one of them would not be varied at all."""
    writes = {f: {k for over in levels.values() for k in over} for f, levels in factors.items()}
    names = list(factors)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            common = sorted(writes[a] & writes[b])
            if common:
                out.append(f"factors.{a} and factors.{b}: both set {', '.join(common)}; "
                           "a config key may be varied by one factor only")
    return out


def dead_factors(factors: dict[str, dict], cells: list[tuple[dict[str, str], Any]], role=lambda k: "") -> list[str]:
    """A factor two of whose levels give the same training objective (compared on the
    resolved values, e.g. the effective decay denominator) in some cell of the others.
    Levels that differ only in plumbing (`out_dir`, `device`, ...) are dead too."""
    out = []
    for f in factors:
        seen: dict[tuple, dict[str, Any]] = {}
        for levels, cfg in cells:
            rest = tuple((g, lv) for g, lv in levels.items() if g != f)
            seen.setdefault(rest, {})[levels[f]] = cfg
        for rest, by_level in seen.items():
            names = list(by_level)
            dup = next(((a, b) for i, a in enumerate(names) for b in names[i + 1:]
                        if by_level[a].objective_dict() == by_level[b].objective_dict()), None)
            if dup:
                where = f" where {', '.join(f'{g}={lv}' for g, lv in rest)}" if rest else ""
                a, b = (by_level[x].to_dict() for x in dup)
                differ = sorted(k for k in a if a[k] != b[k])
                plumbing = differ and all(role(k) == "plumbing" for k in differ)
                why = (f"they differ only in {', '.join(differ)}, which never changes a result" if plumbing
                       else "their resolved configs are equal")
                out.append(f"factors.{f}: levels {dup[0]!r} and {dup[1]!r} train the same objective{where} "
                           f"({why}); the factor is dead")
                break
    return out


def run_order(name: str, replicate: int, n: int) -> list[int]:
    """A seeded random permutation of one replicate block's n arms (the order they launch)."""
    digest = hashlib.sha256(f"{name}:order:{replicate}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "little"))
    order = list(range(n))
    rng.shuffle(order)
    return order


def _cells(factors: dict[str, dict], generators: dict[str, list[str]]) -> list[dict[str, str]]:
    names = list(factors)
    basic = [f for f in names if f not in generators]
    cells = []
    for combo in itertools.product(*(list(factors[f]) for f in basic)):
        levels = dict(zip(basic, combo))
        for g, parts in generators.items():
            sign = 1
            for p in parts:
                sign *= -1 if levels[p] == list(factors[p])[0] else 1
            levels[g] = list(factors[g])[0 if sign < 0 else 1]
        cells.append({f: levels[f] for f in names})
    return cells


def build(spec: SweepSpec) -> SweepSpec:
    """The spec with its trials: every cell of the design (and each control arm) resolved
    to a validated config, times the replicates, in randomised run order."""
    resolved = _resolve_arms(spec)
    trials: list[Trial] = []
    # randomised run order: one block per replicate, the arms shuffled inside it (seeded),
    # so that drift over a sweep is not confounded with any factor
    for r in range(spec.replicates):
        seed = replicate_seed(spec.name, r)
        for i in run_order(spec.name, r, len(resolved)):
            cell, levels, arm, cfg = resolved[i]
            trials.append(Trial(key=f"{cell}#r{r}", cell=cell, replicate=r, seed=seed, levels=dict(levels),
                                arm=arm, config=cfg.replace(seed=seed), run_order=len(trials)))
    _check_identity(trials)
    return dataclasses.replace(spec, base=dict(spec.base), controls=dict(spec.controls),
                               resources=dict(spec.resources), trials=trials)


def _check_identity(trials: list[Trial]) -> None:
    """No two trials may share a key (one would overwrite the other's run) and every run name
    must fit the stores; the name rules make both hold, and this keeps them holding."""
    keys: dict[str, Trial] = {}
    problems = []
    for t in trials:
        if t.key in keys:
            problems.append(f"cell {t.cell}: its trial key {t.key!r} is also another design row's; "
                            "rename the factors or levels")
        keys[t.key] = t
        if len(t.run_name) > MAX_RUN_NAME:
            problems.append(f"cell {t.cell}: its run name is {len(t.run_name)} characters, over MLflow's "
                            f"{MAX_RUN_NAME}; use shorter level names")
            break
    if problems:
        raise SpecError(problems[:5])


def _resolve_arms(spec: SweepSpec) -> list[tuple[str, dict[str, str], str, Any]]:
    """(cell, levels, arm, config) per arm; SpecError naming every cell that does not
    resolve, a control that trains a cell's objective, and every dead factor."""
    arms: list[tuple[str, dict[str, str], str, dict]] = []
    for levels in _cells(spec.factors, spec.generators):
        cell = "|".join(f"{f}={lv}" for f, lv in levels.items())
        arms.append((cell, levels, "factorial", _resolve(spec.base, *(spec.factors[f][lv] for f, lv in levels.items()))))
    for cname, over in spec.controls.items():
        arms.append((f"control={cname}", {f: "" for f in spec.factors}, f"control:{cname}", _resolve(spec.base, over)))
    problems: list[str] = []
    seen: dict[str, str] = {}
    resolved: list[tuple[str, dict[str, str], str, Any]] = []
    for cell, levels, arm, over in arms:
        try:
            cfg = spec.wl.config(over)
        except ValueError as e:
            problems.append(f"cell {cell}: {e}")
            continue
        sig = repr(sorted(cfg.objective_dict().items()))
        if sig in seen and arm != "factorial":
            problems.append(f"cell {cell}: trains the same objective as cell {seen[sig]}")
        seen.setdefault(sig, cell)
        resolved.append((cell, levels, arm, cfg))
    if not problems:
        problems += dead_factors(spec.factors, [(lv, cfg) for _, lv, arm, cfg in resolved if arm == "factorial"],
                                 spec.wl.role)
    if problems:
        raise SpecError(problems)
    return resolved


def alias_structure(spec: SweepSpec, max_order: int = 2) -> list[str]:
    """The defining relation and the aliases of main effects and two-factor interactions."""
    if not spec.generators:
        return ["full factorial: no effect is aliased"]
    names = list(spec.factors)
    relation = defining_relation(spec.generators)

    def fmt(w):
        return ":".join(sorted(w, key=names.index)) if w else "I"

    lines = ["I = " + " = ".join(sorted((fmt(w) for w in relation), key=lambda s: (len(s), s)))]
    for order in range(1, max_order + 1):
        for eff in itertools.combinations(names, order):
            e = frozenset(eff)
            aliases = sorted({fmt(e ^ w) for w in relation}, key=lambda s: (s.count(":"), s))
            lines.append(f"{fmt(e)} = " + " = ".join(aliases))
    return lines


def smoke(spec: SweepSpec) -> SweepSpec:
    """Every trial shrunk to a few steps, for a quick end-to-end check; named
    `<name>-smoke` so it never mixes with the real sweep's runs."""
    spec = dataclasses.replace(spec, name=f"{spec.name}-smoke")
    return spec.override(**spec.wl.smoke())


def columns(spec: SweepSpec, limit: int = 3) -> list[str]:
    """The responses a sweep's progress and status show."""
    if spec.responses:
        return list(spec.responses)[:limit]
    configs = [t.config for t in spec.trials if t.arm == "factorial"]
    variants = {spec.wl.variant(c) for c in configs}
    names = workloads.registry(spec.workload).default_responses(variants.pop() if len(variants) == 1 else None)
    # never one an arm cannot measure (not measured, degenerate or constant in its stage, or a
    # decoding response where no prompt is decoded)
    return [n for n in names if not unmeasured_responses({n: None}, configs, spec.wl)][:limit]
