"""The parts of a sweep spec that say how it is analysed, each checked with one line per
problem (`trials.validate.parse` calls them): its primary responses and terms, named
contrasts, sequential plan, a confirmation's link to its screening and the timing pass's
settings."""

from __future__ import annotations

from typing import Any

from .fraction import cells
from .registry import PRIMARY_FORM
from .spec import NAME_RE, NAME_RULE, RESERVED_NAMES, SweepSpec
from .store.record import CONFIRMS_NUMBERS, confirms_problem
from trials.timing.timing_settings import TimingSettings


# a plan's own keys; a workload adds its evaluation maxima, `max_<kind>` (`Workload.sequential_fields`)
SEQUENTIAL_KEYS = ("max_replicates", "alpha", "block_errors", "look_every")


def parse_responses(raw: dict, registry, problems: list[str]) -> dict[str, dict[str, Any]]:
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


def parse_primary_terms(raw: dict, factors: dict, controls: dict, contrasts: dict,
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


def parse_contrasts(raw: dict, spec: SweepSpec, problems: list[str]) -> dict[str, dict[str, dict[str, str]]]:
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
        bad = contrast_side_problems(where, sides, spec)
        if bad:
            problems += bad
        else:
            out[name] = sides
    return out


def contrast_side_problems(where: str, sides: dict[str, dict[str, str]], spec: SweepSpec) -> list[str]:
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


def parse_confirms(raw: dict, problems: list[str]) -> dict[str, Any]:
    """A confirmation's link to its screening study (`trials.store.record.confirms_problem`)."""
    given = raw.get("confirms")
    if given is None:
        return {}
    problem = confirms_problem(given)
    if problem:
        problems.append(problem)
        return {}
    return {k: (float(v) if k in CONFIRMS_NUMBERS else v) for k, v in given.items()}


def parse_timing(raw: dict, problems: list[str]) -> dict[str, int]:
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


def parse_sequential(raw: dict, spec: "SweepSpec", problems: list[str]) -> dict[str, Any]:
    """The sequential plan, declared before the first look: the most replicate blocks the
    sweep may grow to, its familywise alpha, and the most items of each kind a re-evaluation
    may reach (the workload's `sequential_fields`: DSpark's prompts and held-out batches),
    which fixes the information scale alpha is spent on."""
    given = raw.get("sequential")
    if given is None:
        return {}
    caps = [k for k in spec.wl.sequential_fields if k not in SEQUENTIAL_KEYS]
    if not isinstance(given, dict) or set(given) - {*SEQUENTIAL_KEYS, *caps} or "max_replicates" not in given:
        problems.append("sequential: {max_replicates: N, alpha: A, " + "".join(f"{k}: N, " for k in caps) +
                        "block_errors: own|pooled, look_every: L} (max_replicates required)")
        return {}
    out: dict[str, Any] = {}
    for key in ("max_replicates", *caps, "look_every"):
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


def sequential_problems(spec: "SweepSpec") -> list[str]:
    """A plan's evaluation maxima below what the sweep's trials already evaluate."""
    out = []
    for key, field_name in spec.wl.sequential_fields.items():
        now = max((getattr(t.config, field_name) for t in spec.trials), default=0)
        if key in spec.sequential and spec.sequential[key] < now:
            out.append(f"sequential.{key}: {spec.sequential[key]} is fewer than the trials' {field_name} ({now})")
    return out
