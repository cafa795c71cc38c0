"""A response's tables as the report's files show them: its simple effects, effects,
margins and errors, the runs in launch order, and a table as HTML or Markdown."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trials.store.ui import md_text
from ..decision import Decision
from ..result_types import NEGLIGIBLE
from .words import fmt


def table_html(df: pd.DataFrame) -> str:
    return df.to_html(float_format=lambda v: fmt(v), na_rep="", border=0, classes="t")


def run_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("run_order", "run_name", "cell", "replicate", "seed", "run_id") if c in df.columns]
    return df[cols].sort_values("run_order" if "run_order" in cols else cols[0]).reset_index(drop=True)


def pct_text(level: float) -> str:
    return f"{100 * level:.3f}".rstrip("0").rstrip(".") + "%"


def col_note(check) -> str:
    margin = f"margin {check.margin_text.replace('+-', '±')}" if check.margin is not None else "secondary, no margin"
    return f"{check.better} is better; {margin}"


def simple_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's primary main effects at each combination of the other factors' levels."""
    rows = [{"term": s.term, "at": s.at, "verdict": s.verdict.verdict, "estimate": s.verdict.estimate,
             "low": s.verdict.interval()[0], "high": s.verdict.interval()[1], "se": s.verdict.se}
            for s in decision.simple if s.response == response]
    return pd.DataFrame(rows, columns=["term", "at", "verdict", "estimate", "low", "high", "se"]).set_index("term")


def term_name(v) -> str:
    """A term as a DOE report names it: by its levels where it has them ("D1: shifted ->
    aligned"), an interaction by its factors ("D1 x D2")."""
    return f"{v.term}: {v.label}" if v.label else v.term.replace(":", " x ")


def effects_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's terms with one interval convention: the (1 - alpha*) interval, the test of
    'no effect'; plain column names (EFFECTS_LEGEND)."""
    rows = [{"term": term_name(v), "effect": v.estimate, "std. error": v.se, "df": v.df, "low": v.ci_low,
             "high": v.ci_high, "p": v.p, "p x family": v.p_adj, "verdict": v.verdict
             + ("" if v.in_family else " (outside the family)")} for v in decision.of(response)]
    return pd.DataFrame(rows, columns=["term", "effect", "std. error", "df", "low", "high", "p", "p x family",
                                       "verdict"]).set_index("term")


def margin_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's terms against its margin, with the other convention alone: the (1 - 2
    alpha*) interval, whose bounds are the two one-sided tests at alpha* (TOST)."""
    rows = [{"term": term_name(v), "low": v.eq_low, "high": v.eq_high, "p (TOST)": v.p_equiv,
             "inside the margin": "yes" if v.verdict == NEGLIGIBLE else "no" if v.matters and (
                 v.eq_low > v.margin or v.eq_high < -v.margin) else "not shown"}
            for v in decision.of(response) if v.margin is not None]
    return pd.DataFrame(rows, columns=["term", "low", "high", "p (TOST)", "inside the margin"]).set_index("term")


EFFECTS_LEGEND = ("effect: the mean at the term's +1 level minus the mean at its -1 (for an interaction, the "
                  "product of its factors' codes); std. error and df: what the test used (the variance model: "
                  "seeds, items x runs, items x term, and block x term where it is judged against it); low, high: "
                  "the interval; p: the t test of 'no effect', unadjusted; p x family: p times the family's size, "
                  "the Bonferroni-adjusted p the verdict's alpha* matches; verdict: one of the four states.")


def errors_table(decision: Decision, response: str) -> pd.DataFrame:
    """What each term's test rests on: its errors, the block-by-term test, how far it is from
    changing state."""
    t = decision.table()
    t = t[t["response"] == response].set_index("term")[["errors", "block_F", "block_p", "to_boundary"]]
    t.index = [term_name(v) for v in decision.of(response)]
    return t.rename(columns={"errors": "errors", "block_F": "block x term F", "block_p": "its p",
                             "to_boundary": "std. errors to a state change"})


def md_table(df: pd.DataFrame) -> str:
    """A table in Markdown, every cell's text shown literally (a `|` in a level name stays in its cell)."""
    df = df.reset_index()
    cols = [md_text(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(fmt(v) if isinstance(v, (float, np.floating)) else md_text(v) for v in row)
                     + " |")
    return "\n".join(lines)
