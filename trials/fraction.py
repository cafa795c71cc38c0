"""A fractional factorial design's algebra, as a spec declares it: generator words, the
defining relation and its resolution, the cells of a fraction, and the alias structure
read off its coded cells (`alias_lines`, which the statistics read the runs' cells with).
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Protocol


class Design(Protocol):
    """What the algebra reads of a spec (`trials.spec.SweepSpec`): a leaf module, which the
    statistics import for `alias_lines`."""
    factors: dict
    generators: dict


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


def alias_structure(spec: Design, max_order: int = 2) -> list[str]:
    """The defining relation and the aliases of main effects and two-factor interactions of
    the spec's fraction, read off its coded cells (`alias_lines`): the statistics read the
    runs' cells with the same function (`analysis.coded_design.alias_structure`)."""
    if not spec.generators:
        return ["full factorial: no effect is aliased"]
    names = list(spec.factors)
    if any(len(spec.factors[f]) != 2 for f in names):
        return ["factors of more than two levels: no alias structure is computed"]
    coded = [[-1 if cell[f] == next(iter(spec.factors[f])) else 1 for f in names]
             for cell in cells(spec.factors, spec.generators)]
    return alias_lines(names, coded, max_order)


def alias_lines(names: list[str], coded: list[list[int]], max_order: int = 2) -> list[str]:
    """The defining relation, then the aliases of every term of up to `max_order` factors, of
    a two-level design given as its coded cells (one row per cell, -1/+1 per factor in
    `names`' order): two terms are aliased when their product columns agree, or are
    opposite, in every cell."""
    def column(term):
        return tuple(math.prod(row[names.index(f)] for f in term) for row in coded)

    def sign(a, b):
        return "" if a == b else "-" if all(x == -y for x, y in zip(a, b)) else None

    terms = [t for r in range(1, len(names) + 1) for t in itertools.combinations(names, r)]
    ones = column(())
    identity = [f"{sign(column(t), ones)}{':'.join(t)}" for t in terms if sign(column(t), ones) is not None]
    lines = ["I = " + " = ".join(identity) if identity else "full factorial: no effect is aliased"]
    for t in (t for t in terms if len(t) <= max_order) if identity else ():
        aliases = [f"{sign(column(o), column(t))}{':'.join(o)}" for o in terms
                   if o != t and sign(column(o), column(t)) is not None]
        lines.append(f"{':'.join(t)} = " + " = ".join(aliases) if aliases else f"{':'.join(t)}: not aliased")
    return lines
