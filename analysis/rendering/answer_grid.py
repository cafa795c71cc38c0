"""The answer at a glance: terms against the primary responses (every response where none is
primary), each cell the verdict, the estimate and the interval its decision used, coloured by
what the term's +1 level does to the response; as text for the terminal and as a DataFrame
for the report's files and the notebook."""

from __future__ import annotations

import pandas as pd

from ..decision import Decision
from ..result_types import BEYOND, MIN_DF


def verdict_table_text(decision: Decision) -> str:
    """The answer at a glance: terms against the primary responses (every response where
    none is primary), each cell the verdict, the estimate and the interval it used."""
    cols = answer_columns(decision)
    grid = verdict_grid(decision, cols)
    heads = [f"{c} ({'+-' + format(decision.checks[c].margin, 'g') if decision.checks[c].margin else 'no margin'})"
             for c in cols]
    term_w = max(len("term"), *(len(str(t)) for t in grid.index))
    widths = [max(len(h), *(len(v) for v in grid[c])) for h, c in zip(heads, cols)]
    lines = ["verdicts (estimate [interval the decision used]):",
             "  " + "term".ljust(term_w) + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    for term, row in grid.iterrows():
        lines.append("  " + str(term).ljust(term_w) + "  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)))
    untested = sorted({v.term for v in decision.family_verdicts() if v.untested and not v.identical and v.response in cols})
    if untested:  # an interval beside "undecided" says why nothing was tested, on the same screen
        lines.append(f"  not tested at this look ({', '.join(untested)}): too few blocks for a term's own error (no look "
                     f"tests under {MIN_DF + 1} blocks); their intervals are shown, nothing was decided")
    return "\n".join(line.rstrip() for line in lines)


# a term that matters is coloured by what it does to the response, not alarmed at
VERDICT_COLOURS = {"better": "#a5d6a7", "better, size unsure": "#dcedc8", "worse": "#ef9a9a",
                   "worse, size unsure": "#f8d7d3", "negligible": "#e4e4e4", "undecided": "#f3e6b3"}


def verdict_colour(v) -> str:
    """A term that matters is coloured by what its +1 level does to the response (better or
    worse), lighter where its size is unsure; negligible and undecided have their own."""
    if not v.matters:
        return v.verdict
    if v.better not in ("higher", "lower"):
        return "undecided"
    way = "better" if (v.estimate > 0) == (v.better == "higher") else "worse"
    return way if v.verdict == BEYOND else f"{way}, size unsure"


def verdict_cell(v) -> str:
    """A verdict with its estimate and the interval its decision used."""
    lo, hi, _ = v.interval()
    return f"{v.verdict}: {v.estimate:+.3g} [{lo:+.3g}, {hi:+.3g}]"


def answer_columns(decision: Decision) -> list[str]:
    """The responses the answer is about: the primary ones, or every one where none is."""
    return [r for r, c in decision.checks.items() if c.margin is not None] or list(decision.checks)


def verdict_grid(decision: Decision, columns: list[str] | None = None) -> pd.DataFrame:
    """Terms against responses (the primary ones by default), each cell `verdict: estimate
    [interval]`."""
    cols = columns or answer_columns(decision)
    rows: dict[str, dict[str, str]] = {}
    for v in decision.verdicts:
        if v.response in cols:
            rows.setdefault(v.term, {})[v.response] = verdict_cell(v)
    return pd.DataFrame.from_dict(rows, orient="index").reindex(columns=cols).fillna("")


def verdict_rows(decision: Decision, response: str) -> pd.DataFrame:
    """One response's contrasts as the decision saw them."""
    t = decision.table()
    t = t[t["response"] == response].set_index("term")
    return t[["verdict", "estimate", "se", "df", "ci_low", "ci_high", "eq_low", "eq_high", "p", "p_adj", "p_equiv",
              "to_boundary", "block_F", "block_p", "in_family", "errors", "decided_at"]]
