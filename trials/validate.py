"""A sweep spec checked as input: YAML in (an alias bomb refused before it is walked), every
part validated with one line per problem, then the cells resolved and checked with the
spec's own problems (`trials.expand`), and what the trials name checked by their workload.
`load_spec` and `parse` are the only ways a spec is made (`parse_layout`: the part of a saved
one that `status` and `list` read, with no workload loaded).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from . import workload as workloads
from .fraction import low_resolution, parse_generator
from .expand import build, layout_trials, resolve_arms, unmeasured_responses
from .workload_defaults import Loaded
from .registry import PRIMARY_FORM
from .store.record import margin_problem
from .spec import MAX_TRIALS, NAME_RE, NAME_RULE, RESERVED_NAMES, SpecError, SweepSpec
from .validate_analysis import (parse_confirms, parse_contrasts, parse_primary_terms, parse_responses, parse_sequential,
                                parse_timing, sequential_problems)
from .store.yaml_input import MAX_SPEC_BYTES, YamlRefused, safe_yaml as read_yaml


TOP_KEYS = {"workload", "name", "base", "factors", "replicates", "design", "controls", "resources",
            "max_concurrent", "max_failures", "description", "responses", "primary_terms", "sequential", "confirms",
            "contrasts", "timing"}


def load_spec(path: str | Path, trusted: bool = True, layout: bool = False) -> SweepSpec:
    """A spec file: the user's own (`trusted`: its workload may be imported by path), or one
    read back from storage (not trusted: only an installed or allowed workload loads);
    `layout`: read as `parse_layout` reads it (no workload at all)."""
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
    return parse_layout(raw) if layout else parse(raw, trusted)


def safe_yaml(text: str) -> Any:
    """`trials.store.yaml_input.safe_yaml`, its refusal a SpecError."""
    try:
        return read_yaml(text)
    except YamlRefused as e:
        raise SpecError([str(e)]) from None


def parse(raw: Any, trusted: bool = True) -> SweepSpec:
    """Validate a whole spec; raise SpecError listing every problem found, in every part
    of it and in the configs of its cells. `trusted`: the spec is the user's own, so its
    workload may be imported by path (`trials.workload.load_workload`)."""
    if not isinstance(raw, dict):
        raise SpecError(["spec: the top level must be a mapping"])
    problems: list[str] = [f"spec: unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})"
                           for key in sorted(set(raw) - TOP_KEYS)]
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"name: required; {NAME_RULE}")
    wl = _parse_workload(raw, trusted)
    fields = set(wl.fields)
    spec = SweepSpec(name=name if isinstance(name, str) else "", base=_parse_base(raw, fields, problems),
                     factors=_parse_factors(raw, fields, problems), workload=raw.get("workload", workloads.DEFAULT),
                     loaded=wl)
    spec.replicates = _parse_replicates(raw, spec.factors, problems)
    spec.generators = _parse_design(raw, spec.factors, problems)
    spec.controls = _parse_controls(raw, fields, problems)
    spec.resources = {"cpu": 1, "gpu": 0, **_parse_resources(raw, problems)}
    spec.max_concurrent = _count(raw, "max_concurrent", 0, problems)
    spec.max_failures = _count(raw, "max_failures", 2, problems)
    spec.description = str(raw.get("description", ""))
    spec.responses = parse_responses(raw, wl.registry, problems) or dict(wl.margins)  # the workload's margins
    spec.contrasts = parse_contrasts(raw, spec, problems)
    spec.primary_terms = parse_primary_terms(raw, spec.factors, spec.controls, spec.contrasts, problems)
    spec.sequential = parse_sequential(raw, spec, problems)
    spec.confirms = parse_confirms(raw, problems)
    spec.timing = parse_timing(raw, problems)
    if problems:
        raise SpecError(problems + [p for p in _cell_problems(spec) if p not in problems])
    spec = build(spec)
    problems = unmeasured_responses(spec.responses, [t.config for t in spec.trials if t.arm == "factorial"], wl)
    problems += target_path_problems(spec) + sequential_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def parse_layout(raw: Any) -> SweepSpec:
    """What `trials status` and `list` need of a saved spec: its name, factors and levels,
    replicates, design, controls and declared responses, checked as a spec's are, and its
    trials' keys, cells, seeds and run order (`trials.expand.layout_trials`), with no workload
    loaded and no config resolved: nothing in the file is imported or run. SpecError lists
    every problem found."""
    if not isinstance(raw, dict):
        raise SpecError(["spec: the top level must be a mapping"])
    problems: list[str] = [f"spec: unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})"
                           for key in sorted(set(raw) - TOP_KEYS)]
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append(f"name: required; {NAME_RULE}")
    workload = raw.get("workload", workloads.DEFAULT)
    if not isinstance(workload, str) or not workload:
        problems.append(f"workload: a workload's name or `package.module:object`, got {str(workload)[:60]!r}")
    spec = SweepSpec(name=name if isinstance(name, str) else "", base={}, factors=_parse_factors(raw, None, problems),
                     workload=workload if isinstance(workload, str) else workloads.DEFAULT)
    spec.replicates = _parse_replicates(raw, spec.factors, problems)
    spec.generators = _parse_design(raw, spec.factors, problems)
    spec.controls = _parse_controls(raw, None, problems)
    spec.description = str(raw.get("description", ""))
    given = raw.get("responses") or {}
    if not isinstance(given, dict) or not all(isinstance(d, dict) and margin_problem(d.get("margin")) is None
                                              for d in given.values()):
        problems.append(f"responses: must map metric names to {PRIMARY_FORM}")
    else:
        spec.responses = {str(k): dict(v) for k, v in given.items()}
    if problems:
        raise SpecError(problems)
    return layout_trials(spec)


def _parse_workload(raw: dict, trusted: bool) -> Loaded:
    """The workload the spec names (the default where it names none); a name that does not
    load stops the check here, since every config field depends on it."""
    name = raw.get("workload", workloads.DEFAULT)
    if not isinstance(name, str) or not name:
        raise SpecError([f"workload: a workload's name or `package.module:object`, got {str(name)[:60]!r}"])
    try:
        return workloads.load_workload(name, trusted)
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
    has, or a CUDA device where torch sees none (a config's `device`, where its workload
    has one)."""
    import os

    cuda = sorted({t.cell for t in spec.trials if getattr(t.config, "device", "cpu") == "cuda"})
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
        parts = parse_generator(word, list(factors))
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
        problems += low_resolution(list(factors), generators)
    return generators


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


def _overrides_ok(where: str, over: Any, fields: set[str], problems: list[str]) -> bool:
    """A level's or a control's overrides: a mapping (else refused, and left out); every
    unknown field named."""
    if not isinstance(over, dict):
        problems.append(f"{where}: must map to config overrides")
        return False
    if fields is not None:  # None: a layout, read without its workload
        problems += [f"{where}: unknown trainer config field {key!r}" for key in sorted(set(over) - fields)]
    return True


def _cell_problems(spec: SweepSpec) -> list[str]:
    """Every stage is checked: the cells are resolved from what is valid so far, so the
    problems of their configs are listed with the spec's own."""
    known = set(spec.wl.fields)
    factors = {f: {lv: {k: v for k, v in over.items() if k in known} for lv, over in levels.items()}
               for f, levels in spec.factors.items() if len(levels) >= 2}
    if not factors or clashing_factors(factors):
        return []
    check = SweepSpec(name="check", workload=spec.workload, loaded=spec.wl, factors=factors,
                      base={k: v for k, v in spec.base.items() if k in known},
                      controls={c: {k: v for k, v in over.items() if k in known} for c, over in spec.controls.items()})
    try:
        resolve_arms(check)
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
