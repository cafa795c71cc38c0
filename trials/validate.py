"""A sweep spec checked as input: YAML in (an alias bomb refused before it is walked), every
part validated with one line per problem, then the cells resolved and checked with the
spec's own problems (`trials.expand`), and what the trials name checked by their workload.
`load` and `parse` are the only ways a spec is made.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from . import workload as workloads
from .fraction import cells, low_resolution, parse_generator
from .expand import build, layout_trials, resolve_arms, unmeasured_responses
from .workload_defaults import Loaded
from .registry import PRIMARY_FORM
from .store.record import margin_problem
from .spec import MAX_TRIALS, NAME_RE, NAME_RULE, RESERVED_NAMES, SpecError, SweepSpec
from .timing_settings import TimingSettings
from .store.record import CONFIRMS_NUMBERS, confirms_problem
from .store.yaml_input import MAX_SPEC_BYTES, YamlRefused, safe_yaml as read_yaml


TOP_KEYS = {"workload", "name", "base", "factors", "replicates", "design", "controls", "resources",
            "max_concurrent", "max_failures", "description", "responses", "primary_terms", "sequential", "confirms",
            "contrasts", "timing"}


SEQUENTIAL_KEYS = {"max_replicates", "alpha", "max_prompts", "max_eval_batches", "block_errors", "look_every"}




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
    spec.responses = _parse_responses(raw, wl.registry, problems) or dict(wl.margins)  # the workload's margins
    spec.contrasts = _parse_contrasts(raw, spec, problems)
    spec.primary_terms = _parse_primary_terms(raw, spec.factors, spec.controls, spec.contrasts, problems)
    spec.sequential = _parse_sequential(raw, spec, problems)
    spec.confirms = _parse_confirms(raw, problems)
    spec.timing = _parse_timing(raw, problems)
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


def _parse_primary_terms(raw: dict, factors: dict, controls: dict, contrasts: dict,
                         problems: list[str]) -> list[str]:
    """The family's terms: factor names (a main effect; every pair of levels of a factor of
    more than two), interactions `A:B`, named contrasts, and control names (every factorial
    arm against it)."""
    given = raw.get("primary_terms")
    if given is None:
        return []
    if not isinstance(given, list) or not given or not all(isinstance(t, str) for t in given):
        problems.append("primary_terms: a non-empty list of factor names, interactions (A:B), contrasts "
                        "and control names")
        return []
    clean = []
    for term in given:
        parts = term.split(":")
        if (term in controls or term in contrasts) and term not in factors:
            clean.append(term)
        elif all(p in factors for p in parts) and len(set(parts)) == len(parts):
            clean.append(":".join(sorted(parts, key=list(factors).index)))
        else:
            problems.append(f"primary_terms: {term[:80]!r} is neither a factor, an interaction of distinct "
                            f"factors (A:B), a contrast nor a control (factors: {', '.join(factors)}; "
                            f"contrasts: {', '.join(contrasts) or 'none'}; controls: {', '.join(controls) or 'none'})")
    if len(set(clean)) < len(clean):
        problems.append("primary_terms: a term is named twice")
    return clean


CONTRAST_FORM = "{from: {FACTOR: LEVEL, ...}, to: {FACTOR: LEVEL, ...}}"


def _parse_contrasts(raw: dict, spec: SweepSpec, problems: list[str]) -> dict[str, dict[str, dict[str, str]]]:
    """Named contrasts between two settings of the same factors: each side names a level of
    each of those factors; the design's cells at each side must exist and hold every level of
    every other factor equally often (so that no other main effect enters the difference: in
    a fraction, a side may fall on cells that do not)."""
    given = raw.get("contrasts")
    if given is None:
        return {}
    if not isinstance(given, dict) or not given:
        problems.append(f"contrasts: a mapping of contrast names to {CONTRAST_FORM}")
        return {}
    out: dict[str, dict[str, dict[str, str]]] = {}
    for name, decl in given.items():
        name = str(name)
        where = f"contrasts.{name[:80]}"
        if not NAME_RE.match(name):
            problems.append(f"{where}: a contrast name must be {NAME_RULE}")
            continue
        if name in spec.factors or name in spec.controls or name in RESERVED_NAMES:
            problems.append(f"{where}: {name!r} is already a factor, a control or a reserved name; "
                            "call the contrast something else")
            continue
        if not isinstance(decl, dict) or set(decl) != {"from", "to"} or \
                not all(isinstance(decl[k], dict) and decl[k] for k in ("from", "to")):
            problems.append(f"{where}: {CONTRAST_FORM}")
            continue
        sides = {k: {str(f): str(lv) for f, lv in decl[k].items()} for k in ("from", "to")}
        bad = _contrast_side_problems(where, sides, spec)
        if bad:
            problems += bad
        else:
            out[name] = sides
    return out


def _contrast_side_problems(where: str, sides: dict[str, dict[str, str]], spec: SweepSpec) -> list[str]:
    if set(sides["from"]) != set(sides["to"]):
        return [f"{where}: from and to must name the same factors (from: {', '.join(sides['from'])}; "
                f"to: {', '.join(sides['to'])})"]
    if sides["from"] == sides["to"]:
        return [f"{where}: from and to are the same setting; a contrast compares two"]
    out = []
    for side, setting in sides.items():
        for f, lv in setting.items():
            if f not in spec.factors:
                out.append(f"{where}.{side}: {f[:80]!r} is not a factor (factors: {', '.join(spec.factors)})")
            elif lv not in spec.factors[f]:
                out.append(f"{where}.{side}.{f}: {lv[:80]!r} is not one of its levels ({', '.join(spec.factors[f])})")
    if out:
        return out
    try:
        design = cells(spec.factors, spec.generators)
    except (KeyError, IndexError):  # a fraction the design's own check refuses: named there
        return out
    for side, setting in sides.items():
        at = [c for c in design if all(c[f] == lv for f, lv in setting.items())]
        label = ", ".join(f"{f}={lv}" for f, lv in setting.items())
        if not at:
            out.append(f"{where}.{side}: no cell of the design has {label}")
            continue
        for g in (g for g in spec.factors if g not in setting):
            counts = [sum(c[g] == lv for c in at) for lv in spec.factors[g]]
            if len(set(counts)) > 1:
                out.append(f"{where}.{side}: the design's cells at {label} do not hold every level of {g} equally "
                           f"often ({', '.join(f'{lv}: {n}' for lv, n in zip(spec.factors[g], counts))}), so "
                           f"{g}'s effect would enter the contrast")
    return out


def _parse_confirms(raw: dict, problems: list[str]) -> dict[str, Any]:
    """A confirmation's link to its screening study (`trials.store.record.confirms_problem`)."""
    given = raw.get("confirms")
    if given is None:
        return {}
    problem = confirms_problem(given)
    if problem:
        problems.append(problem)
        return {}
    return {k: (float(v) if k in CONFIRMS_NUMBERS else v) for k, v in given.items()}


def _parse_timing(raw: dict, problems: list[str]) -> dict[str, int]:
    """How the sweep's timing pass times it where the tool times it itself (`trials augment
    --until-decided` before a look of a timed primary response; a confirmation carries its
    screening's): `TimingSettings`' fields, checked as `trials time`'s flags are."""
    given = raw.get("timing")
    if given is None:
        return {}
    fields = set(TimingSettings.__dataclass_fields__)
    if not isinstance(given, dict) or set(given) - fields:
        problems.append(f"timing: {{{', '.join(f'{k}: N' for k in TimingSettings.__dataclass_fields__)}}} (any of "
                        "them), the settings of `trials time`")
        return {}
    try:
        TimingSettings(**given)
    except (TypeError, ValueError) as e:
        problems.append(f"timing: {str(e).replace('--', '')}")
        return {}
    return dict(given)


def _parse_sequential(raw: dict, spec: "SweepSpec", problems: list[str]) -> dict[str, Any]:
    """The sequential plan, declared before the first look: the most replicate blocks the
    sweep may grow to, its familywise alpha, and the most prompts (or held-out batches) a
    re-evaluation may reach, which fixes the information scale alpha is spent on."""
    given = raw.get("sequential")
    if given is None:
        return {}
    if not isinstance(given, dict) or set(given) - SEQUENTIAL_KEYS or "max_replicates" not in given:
        problems.append("sequential: {max_replicates: N, alpha: A, max_prompts: P, max_eval_batches: B, "
                        "block_errors: own|pooled, look_every: L} (max_replicates required)")
        return {}
    out: dict[str, Any] = {}
    for key in ("max_replicates", "max_prompts", "max_eval_batches", "look_every"):
        v = given.get(key)
        if v is None:
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            problems.append(f"sequential.{key}: an integer >= 1, got {v!r}")
            continue
        out[key] = v
    if "block_errors" in given:
        if given["block_errors"] in ("own", "pooled"):
            out["block_errors"] = given["block_errors"]
        else:
            problems.append(f"sequential.block_errors: 'own' (each term against its own block-by-term error, the "
                            f"default) or 'pooled' (every term against the pooled residual, with a caveat), got "
                            f"{str(given['block_errors'])[:40]!r}")
    reps = out.get("max_replicates")
    if reps is not None and (reps < 2 or reps < spec.replicates):
        problems.append(f"sequential.max_replicates: at least 2 and at least the sweep's {spec.replicates} "
                        f"replicates, got {reps}")
    alpha = given.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
        problems.append(f"sequential.alpha: a number in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is "
                        f"empty), got {alpha!r}")
    else:
        out["alpha"] = float(alpha)
    if not spec.responses:
        problems.append("sequential: a plan needs primary responses with margins (responses:) to decide")
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


def sequential_problems(spec: "SweepSpec") -> list[str]:
    """A plan's evaluation maxima below what the sweep's trials already evaluate."""
    out = []
    for key, field_name in spec.wl.sequential_fields.items():
        now = max((getattr(t.config, field_name) for t in spec.trials), default=0)
        if key in spec.sequential and spec.sequential[key] < now:
            out.append(f"sequential.{key}: {spec.sequential[key]} is fewer than the trials' {field_name} ({now})")
    return out


