"""The family's decision at one look (`Decision`): every verdict with the alpha it was tested
at (one alpha for the family, Bonferroni over its hypotheses, spent over a plan's looks), the
responses' checks and noise splits, the simple effects, and the method in words."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .result_types import BEYOND, NEGLIGIBLE, UNDECIDED, UNSURE, VERDICTS, ResponseCheck, SimpleEffect, Verdict, pct


@dataclass
class Decision:
    alpha: float
    adjust: str
    alpha_star: float
    family: int
    checks: dict[str, ResponseCheck]
    verdicts: list[Verdict]
    primary_terms: list[str] = field(default_factory=list)
    simple: list[SimpleEffect] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    noise: dict = field(default_factory=dict)  # response -> its noise split (analysis.variance.Split)
    caveats: dict[str, list[str]] = field(default_factory=dict)  # response -> what its verdicts must be read with
    levels: dict[str, tuple[float, float, int]] = field(default_factory=dict)  # response -> (two-, one-sided, look)

    def alpha_of(self, response: str) -> float:
        """The two-sided nominal level this look tests `response`'s hypotheses at."""
        return self.levels.get(response, (self.alpha_star,))[0]

    def alpha_eq_of(self, response: str) -> float:
        """The one-sided nominal level of its 'negligible' and 'beyond the margin' tests."""
        return self.levels.get(response, (self.alpha_star, self.alpha_star))[1]

    def of(self, response: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.response == response]

    def primary(self) -> list[str]:
        return [r for r, c in self.checks.items() if c.primary]

    def family_verdicts(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.in_family]

    def table(self) -> pd.DataFrame:
        cols = ["response", "term", "label", "verdict", "estimate", "se", "df", "ci_low", "ci_high", "eq_low",
                "eq_high", "margin", "better", "p", "p_adj", "p_equiv", "detectable", "to_boundary", "alpha_star",
                "alpha_eq", "decided_at", "in_family", "errors", "block_F", "block_p", "next_step", "few"]
        rows = []
        for v in self.verdicts:
            row = {c: getattr(v, c) for c in cols if hasattr(v, c)}
            row["block_F"] = v.block.F if v.block else np.nan
            row["block_p"] = v.block.p if v.block else np.nan
            rows.append(row)
        return pd.DataFrame(rows, columns=cols)

    def counts(self) -> dict[str, int]:
        """The family's verdicts by state."""
        fam = self.family_verdicts()
        return {k: sum(v.verdict == k for v in fam) for k in VERDICTS}

    def undecided(self) -> int:
        return self.counts()[UNDECIDED]

    def counts_text(self) -> str:
        c = self.counts()
        return (f"{c[BEYOND]} matter beyond the margin, {c[UNSURE]} matter (size unsure), {c[NEGLIGIBLE]} negligible, "
                f"{c[UNDECIDED]} undecided")

    def method(self) -> str:
        terms = ", ".join(self.primary_terms)
        adj = (f"Bonferroni over the family's {self.family} hypotheses (primary responses x primary terms: {terms})"
               if self.adjust == "bonferroni" else "no adjustment")
        sequential = any(a2 != self.alpha_star or a1 != self.alpha_star for a2, a1, _ in self.levels.values())
        head = (f"one alpha for every verdict: alpha {self.alpha:.3g}, {adj}, so each hypothesis has alpha* = "
                f"{self.alpha_star:.3g}")
        if not sequential:
            return (head + ", other terms and responses too, outside the family; intervals: "
                    f"{pct(1 - self.alpha_star)} for 'no effect', {pct(1 - 2 * self.alpha_star)} (one-sided bounds "
                    "at alpha*) for 'beyond the margin' and 'negligible' (TOST); factors of more than two levels as "
                    "pairwise contrasts")
        at = "; ".join(f"{r}: {a2:.3g} two-sided, {a1:.3g} one-sided (look {k})" for r, (a2, a1, k) in
                       self.levels.items())
        return (head + " spent over the plan's looks with group-sequential boundaries calibrated to each t "
                f"statistic's df; this look's nominal levels for normal statistics (each term's own, at its df, is "
                f"in its verdict's interval): {at}; intervals: (1 - level) for 'no effect', (1 - 2 x one-sided level) "
                "for 'beyond the margin' and 'negligible' (TOST); a hypothesis decided at an earlier look keeps that "
                "look's verdict and interval (binding); factors of more than two levels as pairwise contrasts")
