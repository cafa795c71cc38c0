"""Where a response's noise comes from: the evaluation (which prompts were decoded, which
held-out batches were scored) or the training (which seed), and so which next step is the
cheaper way to decide a term.

Every run evaluates the same items (prompts, or held-out batches) with the same seeds, so
the item-to-item spread common to all runs cancels in every contrast; what remains is the
item x run interaction, measured on the contrast itself by a delete-a-group jackknife over
items. Each run records its evaluation-derived responses recomputed without each of G item
groups (`jack/<response>@g<k>`, item i in group i mod G, the same items in every run). The
contrast computed on the runs' values without group g, c_(-g), uses the same runs (the same
seeds) for every g, so the jackknife

    var_eval = (G - 1) / G * sum_g (c_(-g) - mean_g c_(-g))^2

estimates the contrast's evaluation variance. It recomputes the full statistic, so it holds
for a mean (tau), a nonlinear statistic (ECE) and a ranked one (AUROC) alike. Runs recorded
before the jackknife carry only each prompt group's own value (`split/<response>@g<k>`);
for a mean response (spec/tau) Var_g(c_g) / G is the same estimate, for any other it is
biased, and it is not used.

Over a response's main-effect terms, var_eval / (se^2 / sigma^2) estimates the evaluation
part of the residual variance, sigma_eval^2; its share of sigma^2 gets an interval from the
two estimates' degrees of freedom ((G - 1) per term for the jackknife, the residual df for
sigma^2): share / F(0.975; d1, d2) to share / F(0.025; d1, d2). A share is never capped: over
100% says the model does not fit (the seeds' part comes out negative). With k times the
items the evaluation part shrinks k-fold and the seeds' part stays: what `trials reeval`
buys without training anything. Timed responses (the timing pass's) are not priced in items:
more prompts do not reduce a run's timing noise.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.regression.linear_model import OLS

from trials.registry import Registry, jack_groups, jack_name, split_name
from trials.workload import registry

from .design import factorial_rows
from .types import DECISION_POWER, Split, Verdict
from .model import fit_response, term_contrasts
from .power import p_decided

PROMPT_FACTORS = (2, 3, 4, 8, 16)  # the multiples of today's items the planner prices
LEGACY_MEAN = ("spec/tau",)  # responses whose prompt-group values average to the full value
DECODED = ("spec/", "conf/", "sched/")  # responses of the decoded prompts; the others of held-out batches
COUNTS = {"prompts": "split/prompts", "eval_batches": "split/eval_batches", "timing_prompts": "timing/prompts"}


def kind_of(response: str, rules: Registry | None = None) -> str:
    """What a re-evaluation adds to a response: prompts, held-out batches, or (a timed
    response of the timing pass) the prompts the pass decodes."""
    if (rules or registry()).is_timed(response):
        return "timing_prompts"
    return "prompts" if response.startswith(DECODED) else "eval_batches"


def groups_of(df: pd.DataFrame, response: str, name=jack_name) -> int:
    """How many evaluation groups the runs carry for a response (0: none)."""
    g = 0
    while name(response, g) in df.columns:
        g += 1
    return g


def split(df: pd.DataFrame, response: str, factors: list[str], rules: Registry | None = None) -> Split | None:
    """The evaluation and between-seed parts of a response's noise, or None where the runs
    carry no usable record of the evaluation's noise (or the response is timed)."""
    data = factorial_rows(df, factors)
    kind = kind_of(response, rules)
    count = COUNTS[kind]
    if count not in data.columns or data[count].isna().any() or data[count].nunique() != 1:
        return None  # no evaluation record, or runs evaluated on different counts (a reeval unfinished)
    # the groups of the runs' latest evaluation: a smaller reeval leaves older groups' values behind
    G = jack_groups(int(data[count].iloc[0])) if groups_of(data, response) else 0
    legacy = G < 2 and response in LEGACY_MEAN
    if legacy:
        G = groups_of(data, response, split_name)
    name = split_name if legacy else jack_name
    cols = [name(response, g) for g in range(G)]
    if G < 2 or count not in data.columns or data[cols + [count]].isna().any().any():
        return None
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    full = fit_response(data, response, factors, block, errors="pooled")
    sigma2 = float(full.result.mse_resid)
    se2 = {c.term: c.se ** 2 for c in term_contrasts(full, data, factors)}
    by_group: dict[str, list[float]] = {}
    # the same runs, so the same terms and design as the full fit: only the response differs,
    # and one fit of every group's column at once gives each group's coefficients (a refit per
    # group cost one decomposition of the design each: minutes at hundreds of blocks)
    Y = np.column_stack([pd.to_numeric(data[col]).to_numpy(dtype=float) for col in cols])  # (n, G)
    pinv = getattr(full.result.model, "pinv_wexog", None)  # statsmodels keeps the design's pseudo-inverse
    params = (pinv @ Y if pinv is not None else
              np.asarray(OLS(Y, full.result.model.exog).fit().params).reshape(-1, len(cols)))  # (p, G)
    for g in range(len(cols)):
        group = replace(full, result=SimpleNamespace(params=params[:, g], df_resid=full.result.df_resid))
        for c in term_contrasts(group, data, factors):
            by_group.setdefault(c.term, []).append(c.estimate)
    if legacy:
        var_eval = {t: float(np.var(v, ddof=1) / G) for t, v in by_group.items() if len(v) == G}
    else:
        var_eval = {t: float((G - 1) / G * np.sum((np.asarray(v) - np.mean(v)) ** 2))
                    for t, v in by_group.items() if len(v) == G}
    main = [t for t in var_eval if t in se2 and se2[t] > 0 and ":" not in t] or \
        [t for t in var_eval if t in se2 and se2[t] > 0]
    if not main or sigma2 <= 0:
        return None
    share = float(np.mean([var_eval[t] / (se2[t] / sigma2) for t in main])) / sigma2
    d1, d2 = float((G - 1) * len(main)), float(full.result.df_resid)
    low, high = share / stats.f.ppf(0.975, d1, d2), share / stats.f.ppf(0.025, d1, d2)
    method = (f"prompt-group values, {G} groups (a mean response)" if legacy
              else f"jackknife over {G} groups")
    items = int(pd.to_numeric(data[count]).median())
    return Split(response, kind, method, G, items, math.sqrt(sigma2), share, float(low), float(high), d1, d2,
                 var_eval)


def prompts_to_decide(v: Verdict, var_eval: float, target: float = DECISION_POWER) -> int | None:
    """The smallest multiple k of today's evaluation items (among PROMPT_FACTORS) with which
    the term is decided with probability `target` if its effect is as estimated: the
    evaluation part of its variance shrinks k-fold, the seeds' part stays, the residual df
    stay. None if even the largest multiple does not."""
    seed = max(v.se ** 2 - var_eval, 0.0)
    for k in PROMPT_FACTORS:
        se = math.sqrt(seed + var_eval / k)
        if se > 0 and p_decided(v.estimate, se, v.df, v.alpha_star, v.margin) >= target:
            return k
    return None


def why_not_items(v: Verdict, var_eval: float) -> str:
    """Why more evaluation items alone would not decide a term, in one clause."""
    seed = max(v.se ** 2 - var_eval, 0.0)
    k = PROMPT_FACTORS[-1]
    if seed >= var_eval / k:
        return (f"more items alone would not (up to {k}x): the seeds' part of its se, {math.sqrt(seed):.3g}, "
                "stays")
    margin = f" and +-{v.margin:g}" if v.margin is not None else ""
    return (f"more items alone would not (up to {k}x): its se would fall to {math.sqrt(seed + var_eval / k):.3g}, "
            f"but its estimate {v.estimate:+.3g} lies so near the boundaries (0{margin}) that it would stay "
            f"undecided more than {1 - DECISION_POWER:.0%} of the time")
