"""A fractional factorial design's algebra, as a spec declares it: generator words, the
defining relation and its resolution, the cells of a fraction, and the alias structure
(computed by `analysis.design.alias_structure` on the coded cells: one implementation for
the spec and for the runs).
"""

from __future__ import annotations

import itertools
import re

from .spec import SweepSpec


def parse_generator(text: str, factors: list[str]) -> list[str] | None:
    text = str(text).strip()
    parts = [p for p in re.split(r"[*:·\s]+", text) if p]
    if len(parts) == 1 and parts[0] not in factors and all(ch in factors for ch in parts[0]):
        parts = list(parts[0])  # "ABC" with one-letter factor names
    return parts if all(p in factors for p in parts) else None


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


def low_resolution(names: list[str], generators: dict[str, list[str]]) -> list[str]:
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


def cells(factors: dict[str, dict], generators: dict[str, list[str]]) -> list[dict[str, str]]:
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


def alias_structure(spec: SweepSpec, max_order: int = 2) -> list[str]:
    """The defining relation and the aliases of main effects and two-factor interactions,
    read off the fraction's coded cells by the statistics' own `analysis.design.alias_structure`
    (the report reads the runs' cells with it: the two cannot disagree)."""
    if not spec.generators:
        return ["full factorial: no effect is aliased"]
    import pandas as pd  # heavy (pandas, numpy): only `trials validate` of a fraction prints this

    from analysis.design import alias_structure as read_off

    coded = pd.DataFrame([{f: -1 if level == next(iter(spec.factors[f])) else 1 for f, level in cell.items()}
                          for cell in cells(spec.factors, spec.generators)])
    return read_off(coded, max_order)

