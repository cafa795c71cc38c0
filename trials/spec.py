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
resources: {cpu: 1, gpu: 0}         # per trial
max_concurrent: 2
max_failures: 2
```

Each factor maps level names to trainer-config overrides. A fraction's generated factor
takes, in every run, the product of the coded levels (-1 = first level listed, +1 = the
second) of the factors in its generator. Seeds come from (sweep name, replicate), so every
cell of one replicate shares its seed (a blocked design) and a rerun reproduces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dspark.config import FIELD_NAMES, Config, from_dict

TOP_KEYS = {"name", "base", "factors", "replicates", "design", "controls", "resources",
            "max_concurrent", "max_failures", "description"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# a run's own columns in Tune's results and in analysis: no factor may take these names
RESERVED_NAMES = ("replicate", "arm", "cell", "seed", "run_order", "run_id", "run_name", "status")
MAX_TRIALS = 10_000  # cells x replicates; checked before any trial is built


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
    config: Config
    run_order: int = 0  # launch position in the sweep (0-based), randomised inside each replicate block

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
    replicates: int = 1
    generators: dict[str, list[str]] = field(default_factory=dict)  # empty = full factorial
    controls: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=lambda: {"cpu": 1, "gpu": 0})
    max_concurrent: int = 0  # 0 = as many as resources allow
    max_failures: int = 2
    description: str = ""
    trials: list[Trial] = field(default_factory=list)

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
        """The trial at a point of Tune's search space (the inverse of `tune_params`)."""
        for t in self.trials:
            if all(params.get(k) == v for k, v in self.tune_params(t).items()):
                return t
        raise KeyError(f"no trial of sweep {self.name!r} at {params}")

    def override(self, **changes: Any) -> "SweepSpec":
        """The same design with every trial's config changed (e.g. a smoke test)."""
        base = {**self.base, **changes}
        return build(self.name, base, self.factors, self.replicates, self.generators, self.controls,
                     self.resources, self.max_concurrent, self.max_failures, self.description)


def same_design(a: SweepSpec, b: SweepSpec) -> bool:
    """Same trials with the same configs (what decides whether a sweep can be resumed)."""
    def sig(s):
        return sorted((t.key, repr(sorted(t.config.to_dict().items()))) for t in s.trials)
    return a.name == b.name and sig(a) == sig(b)


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
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise SpecError([f"spec: {path} is not valid YAML ({str(e).splitlines()[0]})"]) from None
    return parse(raw)


def parse(raw: Any) -> SweepSpec:
    """Validate a whole spec; raise SpecError listing every problem found."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise SpecError(["spec: the top level must be a mapping"])
    for key in sorted(set(raw) - TOP_KEYS):
        problems.append(f"spec: unknown key {key!r} (allowed: {', '.join(sorted(TOP_KEYS))})")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append("name: required; letters, digits, '_', '-' and '.' only")
    base = raw.get("base", {})
    if not isinstance(base, dict):
        problems.append("base: must be a mapping of trainer config fields")
        base = {}
    for key in sorted(set(base) - set(FIELD_NAMES)):
        problems.append(f"base: unknown trainer config field {key!r}")
    factors = raw.get("factors")
    if not isinstance(factors, dict) or not factors:
        problems.append("factors: required, a mapping of factor -> {level: {overrides}}")
        factors = {}
    clean_factors: dict[str, dict[str, dict]] = {}
    for fname, levels in factors.items():
        fname = str(fname)
        if not NAME_RE.match(fname):
            problems.append(f"factors.{fname}: a factor name must be letters, digits, '_', '-' or '.'")
        elif fname in RESERVED_NAMES:
            problems.append(f"factors.{fname}: {fname!r} names a column every run has; "
                            f"call the factor something else (reserved: {', '.join(RESERVED_NAMES)})")
        if not isinstance(levels, dict) or len(levels) < 2:
            problems.append(f"factors.{fname}: needs at least two levels, each mapping to config overrides")
            continue
        clean_factors[fname] = {}
        for lname, over in levels.items():
            lname = str(lname)
            over = over or {}
            if not isinstance(over, dict):
                problems.append(f"factors.{fname}.{lname}: must map to config overrides")
                continue
            for key in sorted(set(over) - set(FIELD_NAMES)):
                problems.append(f"factors.{fname}.{lname}: unknown trainer config field {key!r}")
            clean_factors[fname][lname] = over
    problems += clashing_factors(clean_factors)
    replicates = raw.get("replicates", 1)
    if not isinstance(replicates, int) or isinstance(replicates, bool) or replicates < 1:
        problems.append(f"replicates: must be an integer >= 1, got {replicates!r}")
        replicates = 1
    n_arms = len(controls_raw) if isinstance(controls_raw := raw.get("controls") or {}, dict) else 0
    n_cells = 1
    for levels in clean_factors.values():
        n_cells *= len(levels)
    if n_cells * replicates + n_arms * replicates > MAX_TRIALS:
        problems.append(f"replicates: {n_cells} cells x {replicates} replicates = {n_cells * replicates} trials, "
                        f"more than the {MAX_TRIALS} a sweep may hold")
        replicates = 1
    generators: dict[str, list[str]] = {}
    design = raw.get("design", "full")
    if design != "full":
        gens = design.get("generators") if isinstance(design, dict) and set(design) == {"generators"} else None
        if not isinstance(gens, dict) or not gens:
            problems.append("design: 'full' or {generators: {FACTOR: WORD}} (e.g. {generators: {D: ABC}})")
        else:
            names = list(clean_factors)
            for g, word in gens.items():
                g = str(g)
                parts = _parse_generator(word, names)
                if g not in clean_factors:
                    problems.append(f"design.generators: {g!r} is not a factor")
                elif parts is None:
                    problems.append(f"design.generators.{g}: {word!r} names a factor that does not exist")
                elif g in parts:
                    problems.append(f"design.generators.{g}: a factor cannot generate itself")
                else:
                    generators[g] = parts
            for g, parts in generators.items():
                for f in [g, *parts]:
                    if f in clean_factors and len(clean_factors[f]) != 2:
                        problems.append(f"design: a fraction needs two-level factors; {f} has {len(clean_factors[f])}")
                if any(p in generators for p in parts):
                    problems.append(f"design.generators.{g}: generators must be made of basic (not generated) factors")
    controls = raw.get("controls", {}) or {}
    if not isinstance(controls, dict):
        problems.append("controls: must map control names to config overrides")
        controls = {}
    for cname, over in controls.items():
        if not isinstance(over, dict):
            problems.append(f"controls.{cname}: must map to config overrides")
            continue
        for key in sorted(set(over) - set(FIELD_NAMES)):
            problems.append(f"controls.{cname}: unknown trainer config field {key!r}")
    resources = raw.get("resources", {"cpu": 1, "gpu": 0})
    if not isinstance(resources, dict) or set(resources) - {"cpu", "gpu"} or \
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                    for v in resources.values()):
        problems.append("resources: a mapping with cpu and/or gpu counts >= 0")
        resources = {"cpu": 1, "gpu": 0}
    elif resources.get("cpu", 1) < 1:
        problems.append(f"resources: cpu must be at least 1 (a trial trains on it), got {resources['cpu']!r}")
    max_concurrent = raw.get("max_concurrent", 0)
    if not isinstance(max_concurrent, int) or max_concurrent < 0:
        problems.append(f"max_concurrent: must be an integer >= 0, got {max_concurrent!r}")
    max_failures = raw.get("max_failures", 2)
    if not isinstance(max_failures, int) or max_failures < 0:
        problems.append(f"max_failures: must be an integer >= 0, got {max_failures!r}")
    if problems:
        # every stage is checked: also resolve the cells from what is valid so far, so the
        # problems of the cells' configs are listed with the spec's own
        known = set(FIELD_NAMES)
        base_ok = {k: v for k, v in base.items() if k in known}
        factors_ok = {f: {lv: {k: v for k, v in over.items() if k in known} for lv, over in levels.items()}
                      for f, levels in clean_factors.items() if len(levels) >= 2}
        controls_ok = {c: {k: v for k, v in over.items() if k in known} for c, over in controls.items()
                       if isinstance(over, dict)}
        if factors_ok and not clashing_factors(factors_ok):
            try:
                build("check", base_ok, factors_ok, 1, {}, controls_ok, {"cpu": 1, "gpu": 0}, 0, 0)
            except SpecError as e:
                problems += [p for p in e.problems if p not in problems]
        raise SpecError(problems)
    return build(name, base, clean_factors, replicates, generators, controls,
                 {"cpu": 1, "gpu": 0, **resources}, max_concurrent, max_failures, str(raw.get("description", "")))


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


def dead_factors(factors: dict[str, dict], cells: list[tuple[dict[str, str], Config]]) -> list[str]:
    """A factor two of whose levels give the same training objective (compared on the
    resolved values, e.g. the effective decay denominator) in some cell of the others."""
    out = []
    for f in factors:
        seen: dict[tuple, dict[str, str]] = {}
        for levels, cfg in cells:
            rest = tuple((g, lv) for g, lv in levels.items() if g != f)
            seen.setdefault(rest, {})[levels[f]] = repr(sorted(cfg.objective_dict().items()))
        for rest, by_level in seen.items():
            names = list(by_level)
            dup = next(((a, b) for i, a in enumerate(names) for b in names[i + 1:]
                        if by_level[a] == by_level[b]), None)
            if dup:
                where = f" where {', '.join(f'{g}={lv}' for g, lv in rest)}" if rest else ""
                out.append(f"factors.{f}: levels {dup[0]!r} and {dup[1]!r} train the same objective{where} "
                           f"(their resolved configs are equal); the factor is dead")
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


def build(name, base, factors, replicates, generators, controls, resources, max_concurrent,
          max_failures, description="") -> SweepSpec:
    problems: list[str] = []
    trials: list[Trial] = []
    arms: list[tuple[str, dict[str, str], str, dict]] = []
    for levels in _cells(factors, generators):
        cell = "|".join(f"{f}={lv}" for f, lv in levels.items())
        over = _resolve(base, *(factors[f][lv] for f, lv in levels.items()))
        arms.append((cell, levels, "factorial", over))
    for cname, over in controls.items():
        arms.append((f"control={cname}", {f: "" for f in factors}, f"control:{cname}", _resolve(base, over)))
    seen: dict[str, str] = {}
    resolved: list[tuple[str, dict[str, str], str, Config]] = []
    for cell, levels, arm, over in arms:
        try:
            cfg = from_dict(over)
        except ValueError as e:
            problems.append(f"cell {cell}: {e}")
            continue
        sig = repr(sorted(cfg.objective_dict().items()))
        if sig in seen and arm != "factorial":
            problems.append(f"cell {cell}: trains the same objective as cell {seen[sig]}")
        seen.setdefault(sig, cell)
        resolved.append((cell, levels, arm, cfg))
    if not problems:
        problems += dead_factors(factors, [(lv, cfg) for _, lv, arm, cfg in resolved if arm == "factorial"])
    if problems:
        raise SpecError(problems)
    # randomised run order: one block per replicate, the arms shuffled inside it (seeded),
    # so that drift over a sweep is not confounded with any factor
    for r in range(replicates):
        seed = replicate_seed(name, r)
        for i in run_order(name, r, len(resolved)):
            cell, levels, arm, cfg = resolved[i]
            trials.append(Trial(key=f"{cell}#r{r}", cell=cell, replicate=r, seed=seed, levels=dict(levels),
                                arm=arm, config=cfg.replace(seed=seed), run_order=len(trials)))
    return SweepSpec(name=name, base=dict(base), factors=factors, replicates=replicates, generators=generators,
                     controls=dict(controls), resources=dict(resources), max_concurrent=max_concurrent,
                     max_failures=max_failures, description=description, trials=trials)


def alias_structure(spec: SweepSpec, max_order: int = 2) -> list[str]:
    """The defining relation and the aliases of main effects and two-factor interactions."""
    if not spec.generators:
        return ["full factorial: no effect is aliased"]
    names = list(spec.factors)
    words = [frozenset([g, *parts]) for g, parts in spec.generators.items()]
    relation: set[frozenset] = set()
    for r in range(1, len(words) + 1):  # every product of generator words
        for combo in itertools.combinations(words, r):
            w: frozenset = frozenset()
            for c in combo:
                w = w ^ c
            relation.add(w)

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
    return spec.override(target_steps=8, draft_steps=6, eval_interval=3, eval_batches=1, spec_prompts=2,
                         spec_new_tokens=16, spec_prompt_len=16, max_corpus_bytes=300_000,
                         spec_interval_prompts=0)
