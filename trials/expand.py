"""A validated spec resolved into its trials: each cell of the design (and each control arm)
a config of the workload, times the replicate blocks, in a randomised run order; a spec
grown by replicate blocks, shrunk to a smoke test, or rebased; the responses a sweep shows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .fraction import cells
from .workload_defaults import Loaded
from .registry import Registry
from .spec import MAX_RUN_NAME, MAX_TRIALS, SpecError, SweepSpec, Trial, replicate_seed, run_order


def build(spec: SweepSpec) -> SweepSpec:
    """The spec with its trials: every cell of the design (and each control arm) resolved
    to a validated config, times the replicates, in randomised run order."""
    resolved = resolve_arms(spec)
    named = shared_level_names(spec.factors)
    trials: list[Trial] = []
    # randomised run order: one block per replicate, the arms shuffled inside it (seeded),
    # so that drift over a sweep is not confounded with any factor
    for r in range(spec.replicates):
        seed = replicate_seed(spec.name, r)
        for i in run_order(spec.name, r, len(resolved)):
            cell, levels, arm, cfg = resolved[i]
            trials.append(Trial(key=f"{cell}#r{r}", cell=cell, replicate=r, seed=seed, levels=dict(levels),
                                arm=arm, config=cfg.replace(seed=seed), run_order=len(trials), named=named))
    check_trial_keys(trials)
    return dataclasses.replace(spec, base=dict(spec.base), controls=dict(spec.controls),
                               resources=dict(spec.resources), trials=trials)


def layout_trials(spec: SweepSpec) -> SweepSpec:
    """The spec with its trials as storage knows them (keys, cells, levels, seeds, run order)
    and no config: `build`'s trials without resolving any (`validate.parse_layout`)."""
    arms = [("|".join(f"{f}={lv}" for f, lv in levels.items()), levels, "factorial")
            for levels in cells(spec.factors, spec.generators)]
    arms += [(f"control={c}", {f: "" for f in spec.factors}, f"control:{c}") for c in spec.controls]
    named = shared_level_names(spec.factors)
    trials: list[Trial] = []
    for r in range(spec.replicates):
        seed = replicate_seed(spec.name, r)
        for i in run_order(spec.name, r, len(arms)):
            cell, levels, arm = arms[i]
            trials.append(Trial(key=f"{cell}#r{r}", cell=cell, replicate=r, seed=seed, levels=dict(levels), arm=arm,
                                config=None, run_order=len(trials), named=named))
    return dataclasses.replace(spec, trials=trials)


def shared_level_names(factors: dict[str, dict]) -> tuple[str, ...]:
    """The factors with a level name another factor also uses ("off" and "on" for both
    dropout and warmup): their run names say `factor=level`, since "off·on" says neither."""
    return tuple(f for f, levels in factors.items()
                 if any(set(levels) & set(other) for g, other in factors.items() if g != f))


def check_trial_keys(trials: list[Trial]) -> None:
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


def resolve_arms(spec: SweepSpec) -> list[tuple[str, dict[str, str], str, Any]]:
    """(cell, levels, arm, config) per arm; SpecError naming every cell that does not
    resolve, a control that trains a cell's objective, and every dead factor."""
    arms: list[tuple[str, dict[str, str], str, dict]] = []
    for levels in cells(spec.factors, spec.generators):
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


def _resolve(base: dict, *overrides: dict) -> dict:
    out = dict(base)
    for o in overrides:
        out.update(o)
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


def with_replicates(spec: SweepSpec, replicates: int) -> SweepSpec:
    """The same sweep with more replicate blocks: the existing trials unchanged, each new
    block with its own seed and its own randomised run order, launched after the others."""
    if replicates < spec.replicates:
        raise SpecError([f"replicates: {replicates} is fewer than the sweep's {spec.replicates}"])
    if (len({t.cell for t in spec.trials if t.replicate == 0})) * replicates > MAX_TRIALS:
        raise SpecError([f"replicates: {replicates} blocks would pass the {MAX_TRIALS} trials a sweep may hold"])
    return build(dataclasses.replace(spec, replicates=replicates, trials=[]))


def smoke(spec: SweepSpec) -> SweepSpec:
    """Every trial shrunk to a few steps, for a quick end-to-end check; named
    `<name>-smoke` so it never mixes with the real sweep's runs."""
    spec = dataclasses.replace(spec, name=f"{spec.name}-smoke")
    return with_base(spec, **spec.wl.smoke())


def columns(spec: SweepSpec, limit: int = 3) -> list[str]:
    """The responses a sweep's progress and status show."""
    if spec.responses:
        return list(spec.responses)[:limit]
    if any(t.config is None for t in spec.trials):  # a layout (status, list): no workload to ask
        return []
    configs = [t.config for t in spec.trials if t.arm == "factorial"]
    variants = {spec.wl.variant(c) for c in configs}
    names = spec.wl.registry.default_responses(variants.pop() if len(variants) == 1 else None)
    # never one an arm cannot measure (not measured, degenerate or constant in its stage, or a
    # decoding response where no prompt is decoded)
    return [n for n in names if not unmeasured_responses({n: None}, configs, spec.wl)][:limit]


def unmeasured_responses(responses: dict, configs: list, wl: Loaded) -> list[str]:
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



def with_base(spec: SweepSpec, **changes: Any) -> SweepSpec:
    """The same design with every trial's config changed (e.g. a smoke test)."""
    return build(dataclasses.replace(spec, base={**spec.base, **changes}, trials=[]))
