"""The design as the runs hold it: each factor's levels in the spec's order, the runs
inside the factorial, the coded design matrix and its alias structure. The lowest layer of
`analysis`: every other module takes its level lists and factorial rows from here.
"""

from __future__ import annotations

import pandas as pd

from trials.fraction import alias_lines


def levels(df: pd.DataFrame, factor: str) -> list:
    """A factor's levels in the spec's order (`load_runs` makes each factor an ordered
    categorical); a plain numeric column in ascending order, any other in the order in
    which its levels first appear."""
    col = df[factor]
    if hasattr(col, "cat"):
        return list(col.cat.categories)
    if pd.api.types.is_numeric_dtype(col):
        return sorted(pd.unique(col.dropna()))
    return list(pd.unique(col.dropna()))


def factorial_rows(df: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """The runs inside the factorial (control arms have no level for the factors)."""
    return df.dropna(subset=list(factors))


def with_value(data: pd.DataFrame, response: str) -> pd.DataFrame:
    """The runs that hold a value of `response` (a run whose evaluation failed, or that
    predates a metric, lacks it): each response is analysed on its own runs."""
    if response not in data.columns:
        return data
    return data[pd.to_numeric(data[response], errors="coerce").notna()]


def without_value(data: pd.DataFrame, response: str) -> list[str]:
    """The names of the runs that lack a value of `response`."""
    if response not in data.columns:
        return []
    gone = data[pd.to_numeric(data[response], errors="coerce").isna()]
    names = gone["run_name"] if "run_name" in gone.columns else gone.index
    return [str(n) for n in names]


def design_matrix(data: pd.DataFrame, factors: list[str]) -> pd.DataFrame:
    """The coded design: one row per cell, -1/+1 for two-level factors (low = first level),
    the level index otherwise."""
    rows = []
    for cell, g in data.groupby("cell", observed=True):
        row = {"cell": cell}
        for f in factors:
            lv = levels(data, f)
            i = lv.index(g[f].iloc[0])
            row[f] = (-1 if i == 0 else 1) if len(lv) == 2 else i
        rows.append(row)
    return pd.DataFrame(rows).set_index("cell")


def alias_structure(coded: pd.DataFrame, max_order: int = 2) -> list[str]:
    """The aliases of every main effect and two-factor interaction, read off the coded
    design (one row per cell, -1/+1; `trials.fraction.alias_lines`, the spec's own reading).
    The first line is the defining relation."""
    factors = list(coded.columns)
    if not all(set(coded[f].unique()) <= {-1, 1} for f in factors):
        return ["factors of more than two levels: no alias structure is computed"]
    return alias_lines(factors, coded.to_numpy(int).tolist(), max_order)
