"""Where a response's noise comes from: the evaluation (which prompts were decoded) or the
training (which seed), and so which next step is the cheaper way to decide a term.

Every run decodes the same prompts with the same decoding seeds, so the prompt-to-prompt
spread that is common to all runs cancels in every contrast; a run's own standard error
over its prompts overstates the evaluation noise inside an effect. What remains is the
prompt x run interaction, and it is measured on the contrast itself: each run records its
prompt-derived responses on G disjoint prompt groups (`split/<response>@g<k>`, prompt i in
group i mod G, the same prompts in every run). The contrast computed on group g alone, c_g,
uses the same runs (the same seeds) in every group, so the spread of c_1..c_G is the
evaluation's alone, and the contrast on all P prompts (about their mean) has evaluation
variance

    var_eval = Var_g(c_g) / G.

The rest of the contrast's variance, se^2 - var_eval (floored at zero), is the seeds'.
Over a response's two-level terms, var_eval / (se^2 / sigma^2) estimates the evaluation
part of the residual variance, sigma_eval^2, and sigma^2 - sigma_eval^2 the between-seed
part. With k times the prompts the evaluation part shrinks k-fold and the seeds' part stays:
what `trials reeval` buys without training anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from statsmodels.regression.linear_model import OLS

from dspark.metrics import split_name

from .anova import AnalysisError
from .design import factorial_rows, plain
from .verdicts import DECISION_POWER, Verdict, contrasts, fit_response, p_decided

PROMPT_FACTORS = (2, 4, 8, 16)  # the multiples of today's prompts the planner prices


@dataclass
class Split:
    """One response's noise, split."""
    response: str
    groups: int
    prompts: int
    sigma: float
    sigma_eval: float
    sigma_seed: float
    var_eval: dict[str, float] = field(default_factory=dict)  # term -> the contrast's evaluation variance

    def text(self) -> str:
        share = (self.sigma_eval / self.sigma) ** 2 if self.sigma > 0 else float("nan")
        return (f"{self.response}: residual sigma {self.sigma:.3g} = evaluation {self.sigma_eval:.3g} "
                f"({share:.0%} of the variance, {self.prompts} prompts in {self.groups} groups) + between seeds "
                f"{self.sigma_seed:.3g}")


def groups_of(df: pd.DataFrame, response: str) -> int:
    """How many prompt groups the runs carry for a response (0: none)."""
    g = 0
    while split_name(response, g) in df.columns:
        g += 1
    return g


def split(df: pd.DataFrame, response: str, factors: list[str]) -> Split | None:
    """The evaluation and between-seed parts of a response's noise, or None when the runs
    carry no prompt groups for it (an older store) or a group is missing anywhere."""
    data = plain(factorial_rows(df, factors))
    G = groups_of(data, response)
    cols = [split_name(response, g) for g in range(G)]
    if G < 2 or data[cols].isna().any().any() or "split/prompts" not in data.columns:
        return None
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    full = fit_response(data, response, factors, block, errors="OLS")
    sigma2 = float(full.result.mse_resid)
    se2 = {c.term: c.se ** 2 for c in contrasts(full, data, factors)}
    by_group: dict[str, list[float]] = {}
    for col in cols:
        # the same runs, so the same terms and design as the full fit: only the response differs
        group = replace(full, result=OLS(pd.to_numeric(data[col]).to_numpy(dtype=float), full.result.model.exog).fit())
        for c in contrasts(group, data, factors):
            by_group.setdefault(c.term, []).append(c.estimate)
    var_eval = {t: float(np.var(v, ddof=1) / G) for t, v in by_group.items() if len(v) == G}
    ratios = [var_eval[t] / (se2[t] / sigma2) for t in var_eval if t in se2 and se2[t] > 0 and ":" not in t]
    ratios = ratios or [var_eval[t] / (se2[t] / sigma2) for t in var_eval if t in se2 and se2[t] > 0]
    sigma_eval2 = min(float(np.mean(ratios)), sigma2) if ratios else float("nan")
    prompts = int(pd.to_numeric(data["split/prompts"]).median())
    return Split(response, G, prompts, math.sqrt(sigma2), math.sqrt(sigma_eval2),
                 math.sqrt(max(sigma2 - sigma_eval2, 0.0)), var_eval)


def prompts_to_decide(v: Verdict, var_eval: float, target: float = DECISION_POWER) -> int | None:
    """The smallest multiple k of today's prompts (among PROMPT_FACTORS) with which the term
    is decided with probability `target` if its effect is as estimated: the evaluation part
    of its variance shrinks k-fold, the seeds' part stays, the residual df stay. None if
    even the largest multiple does not."""
    seed = max(v.se ** 2 - var_eval, 0.0)
    for k in PROMPT_FACTORS:
        se = math.sqrt(seed + var_eval / k)
        if se > 0 and p_decided(v.estimate, se, v.df, v.alpha_star, v.margin) >= target:
            return k
    return None
