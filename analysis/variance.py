"""The variance model: what a contrast's error is made of, in one place for the verdicts,
the noise split, the information scale and the planner.

Every run r (cell c, replicate block b) evaluates the same G groups of items (prompts or
held-out batches; item i in group i mod G). Its response is the mean of G per-group values,
the jackknife pseudo-values p_rk = G y_r - (G - 1) y_r(-k) of the records each run keeps
(`jack/<response>@g<k>`: the response without group k; for a mean such as tau, p_rk is the
group's own value):

    p_rk = mu_c + beta_b + a_k + (ac)_ck + (bt)_b,c + u_r + e_rk

For a contrast with model row L (the cells' weights, the block averaged out), each source:

- seeds, u_r: run-to-run training noise, L'(X'X)^-1 L sigma_u^2; shrinks with blocks;
- items x runs, e_rk: L'(X'X)^-1 L sigma_e^2 / G; shrinks with blocks and with items. The
  runs' residual holds these two: sigma^2 = sigma_u^2 + sigma_e^2 / G;
- block x term, (bt): a term's effect that differs from block to block (a seed that favours
  one arm). Every term the verdicts rest on is judged against its own block-by-term mean
  square (q = (B - 1) x its columns df): in a balanced design its expectation is the term's
  variance under random block x term effects (the method-of-moments solution of that mixed
  model), and for a one-column term it is the paired t-test over the blocks' own effects. No
  preliminary test chooses this: a test that pools where it does not reject makes a real
  interaction it misses at few blocks narrow the interval (bench/error_rates.py). The other
  terms are judged against the residual with those parts taken out. A plan may declare
  `block_errors: pooled` (every term against the pooled residual); its verdicts say so.
  Unbalanced designs keep HC2;
- items x term, (ac): an item that favours one arm does so in every block, so more blocks do
  not shrink it and the runs' residual does not hold it; shrinks with items alone. It is
  always in a term's error where the runs carry item records, estimated by moments (below,
  0 where the estimate is negative); its F test (var_jack over its expectation without it, on
  G - 1 and df_resid (G - 1) df) is shown, never used to choose.

Estimates, from the same OLS fitted to every column of pseudo-values (A = (X'X)^-1 X' P):
sigma_e^2 from the runs x groups interaction of its residuals (df_resid (G - 1) df); the
contrast's per-group values C_k = L'A_k, whose variance over groups is the delete-a-group
jackknife's var_jack = Var_k(C_k) / G, with expectation V_it + L'(X'X)^-1 L sigma_e^2 / G.
So V_it = max(0, var_jack - L'(X'X)^-1 L sigma_e^2 / G). A
contrast's variance is seeds + items x runs + items x term, with Satterthwaite's df over its
run-level part and its items x term part (on the jackknife's G - 1 df; at least the smaller
of the two), which move smoothly as the items x term part shrinks to zero; each
share lies in [0, 1] by construction. k times the items divide both evaluation parts by k; b blocks
instead of B multiply the run-level parts by B / b.

A response's noise split is its residual's: the evaluation's share sigma_e^2 / (G sigma^2),
capped at 1, with an F interval on (df_resid (G - 1), df_resid) df. Timed responses (the
timing pass's) are split over the pass's prompts the same way; more of them reduce a timed
value's own noise, not the seeds'.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import stats

from trials.store.items import jack_groups, jack_name, split_name
from trials.registry import UNKNOWN, Registry

from .item_kinds import count_in, kind_of, what
from .model import Fit, block_interaction
from .power import p_decided
from .result_types import BLOCK_ERRORS, DECISION_POWER, BlockTest, TermNoise, Verdict

PROMPT_FACTORS = (2, 3, 4, 8, 16)  # the multiples of today's items the planner prices


def groups_of(df: pd.DataFrame, response: str, name=jack_name) -> int:
    """How many evaluation groups the runs carry for a response (0: none): one past the highest
    group with a column. The workload chose them (`trials.store.items`); a group whose removal
    left the response undefined keeps its column, NaN."""
    prefix = name(response, 0)[:-1]  # `jack/<response>@g`
    found = [int(c[len(prefix):]) for c in df.columns
             if isinstance(c, str) and c.startswith(prefix) and c[len(prefix):].isdigit()]
    return max(found) + 1 if found else 0


@dataclass
class Items:
    """A response's per-item records: each run's pseudo-value per item group."""
    kind: str  # `item_kinds.kind_of`: prompts, eval_batches, timing_prompts, a workload's own; "": the response's own
    method: str
    items: int
    pseudo: np.ndarray  # (n, G), the runs in the model's row order

    @property
    def groups(self) -> int:
        return self.pseudo.shape[1]


def item_records(data: pd.DataFrame, response: str, rules: Registry | None = None) -> Items | None:
    """The runs' pseudo-values of a response, or None where they carry no usable record of
    their evaluation (no jackknife, runs evaluated on different counts, a reeval unfinished).
    Runs recorded before the jackknife keep each prompt group's own value (`split/`), which
    are its pseudo-values for a mean over its items only (its row's `mean_of_items`)."""
    kind, count = kind_of(response, rules), count_in(data, response, rules)
    if count not in data.columns or data[count].isna().any() or data[count].nunique() != 1:
        return None
    G, n_items = groups_of(data, response), int(data[count].iloc[0])
    if G > n_items:  # runs whose items were metrics: a smaller reeval left older groups' values behind
        G = jack_groups(n_items)
    legacy = G < 2 and (rules or UNKNOWN).mean_of_items(response)
    if legacy:
        G = groups_of(data, response, split_name)
    name = split_name if legacy else jack_name
    cols = [name(response, g) for g in range(G)]
    if G < 2 or data.reindex(columns=cols).isna().any().any():
        return None
    values = np.column_stack([pd.to_numeric(data[c]).to_numpy(dtype=float) for c in cols])  # (n, G)
    if legacy:
        pseudo, method = values, f"prompt-group values, {G} groups (a mean response)"
    else:
        full = pd.to_numeric(data[response]).to_numpy(dtype=float)[:, None]
        pseudo, method = G * full - (G - 1) * values, f"jackknife over {G} groups"
    if not np.isfinite(pseudo).all():
        return None
    return Items(kind, method, int(pd.to_numeric(data[count]).median()), pseudo)


def items_unused(data: pd.DataFrame, response: str) -> str:
    """Why the runs' jackknife records of a response are not used (a run without a group's
    value: damage, or a group its removal left undefined), naming the first such run; "" where
    they are used or there are none."""
    G = groups_of(data, response)
    if G < 2:
        return ""
    cols = [jack_name(response, g) for g in range(G)]
    gaps = data.reindex(columns=cols).isna()
    if not gaps.any().any():
        return ""
    i = int(gaps.any(axis=1).to_numpy().nonzero()[0][0])
    run = data["run_name"].iloc[i] if "run_name" in data.columns else f"row {i}"
    g = int(gaps.iloc[i].to_numpy().nonzero()[0][0])
    return (f"{response}: its item records are not used ({int(gaps.any(axis=1).sum())} run(s) lack a group's value, "
            f"e.g. {run} group {g}): its noise is not split and no term's error holds its items x term part")


@dataclass
class Model:
    """One response's variance model: its OLS, the block-by-term tests of its terms, and
    where the runs carry them, the item records' estimates (module docstring)."""
    response: str
    fit: Fit
    blocks: int
    items: Items | None = None
    tests: dict[tuple[str, ...], BlockTest] = field(default_factory=dict)
    ms_rest: float = float("nan")  # the residual without the block-by-term parts judged on their own
    df_rest: float = float("nan")
    ms_item: float = 0.0  # sigma_e^2: one group's items x runs variance
    df_item: float = 0.0
    group_params: np.ndarray | None = None  # (p, G): the model fitted to each group's pseudo-values

    @property
    def sigma2(self) -> float:
        return float(self.fit.result.mse_resid)

    def noise(self, L: np.ndarray) -> TermNoise:
        """The contrast with row L: its variance by source (module docstring)."""
        unscaled = np.asarray(self.fit.result.normalized_cov_params)  # (X'X)^-1
        coef = float(L @ unscaled @ L)
        if self.fit.errors == "HC2":
            run, run_df, source = float(L @ self.fit.cov @ L), self.fit.df_of(L), "HC2"
        else:
            run, run_df, source = self._run_level(L, unscaled, coef)
        item_run = item_run_df = item_term = item_term_df = 0.0
        df = run_df
        if self.items is not None and self.group_params is not None:
            G = self.items.groups
            e_part = coef * self.ms_item / G
            item_run, item_run_df = min(e_part, run), self.df_item
            jack = float(np.var(L @ self.group_params, ddof=1)) / G  # the groups' contrasts (G,)
            item_term_df = G - 1.0
            item_p = float(stats.f.sf(jack / e_part, item_term_df, self.df_item)) if e_part > 0 else 1.0
            if jack > e_part:  # Satterthwaite over the run-level part and the items x term part
                # The items x term part's uncertainty enters in proportion to its size (its estimate on the
                # jackknife's G - 1 df), so the df move smoothly as it shrinks to zero: writing it as
                # jack - e_part, each with its own df, made a part of 0.1% of se^2 cut the df by half.
                item_term = jack - e_part
                total = run + item_term
                df = total ** 2 / (run ** 2 / run_df + item_term ** 2 / item_term_df)
                df = max(df, min(run_df, item_term_df))
            return TermNoise(run - item_run, run_df, item_run, item_run_df, item_term, item_term_df, self.blocks,
                             source, float(df), item_p)
        return TermNoise(run - item_run, run_df, item_run, item_run_df, item_term, item_term_df, self.blocks, source,
                         float(df))

    def _run_level(self, L: np.ndarray, unscaled: np.ndarray, coef: float) -> tuple[float, float, str]:
        """Pooled errors, each term whose block-by-term test is used on its own mean square:
        (variance, Satterthwaite df, source)."""
        parts, rest = [], coef
        for term, test in self.tests.items():
            if not test.used:
                continue
            s = self.fit.slices[term]
            c = float(L[s] @ unscaled[s, s] @ L[s])
            if c > 1e-15 * max(coef, 1e-300):
                parts.append((c * test.ms, float(test.q)))
                rest -= c
        own = bool(parts)
        if rest > 1e-12 * coef or not parts:
            parts.append((max(rest, 0.0) * self.ms_rest, self.df_rest))
        total = sum(v for v, _ in parts)
        denom = sum(v * v / d for v, d in parts if v > 0 and d > 0)
        df = total * total / denom if denom > 0 else self.df_rest
        return total, df, "block x term" if own else "pooled residual"


def residuals(m: Model, index: pd.Index, terms: list[tuple[str, ...]] | None = None) -> pd.Series:
    """The residuals of the model the verdicts use: the OLS with, for every term of `terms`
    (None: every term) judged on its own error, its block-by-term columns added (what that
    error takes out of the residual), on the runs' `index` (the fit's row order). The drift
    check reads these for the family's terms: a block x term interaction the verdicts allow
    for is no drift."""
    fit = m.fit
    y = np.asarray(fit.result.model.endog, float)
    cols = [fit.X]
    if fit.block_cols is not None:
        for term, test in m.tests.items():
            if test.used and term in fit.slices and (terms is None or term in terms):
                M = fit.X[:, fit.slices[term]]
                cols += [M[:, [i]] * fit.block_cols for i in range(M.shape[1])]
    X = np.column_stack(cols)
    resid = y - X @ np.linalg.lstsq(X, y, rcond=None)[0] if X.shape[1] > fit.X.shape[1] else \
        np.asarray(fit.result.resid, float)
    return pd.Series(resid, index=index)


def build(data: pd.DataFrame, response: str, fit: Fit, terms: list[tuple[str, ...]], rules: Registry | None = None,
          block_tests: bool = True) -> Model:
    """The variance model of a response fitted as `fit` on the runs `data` (in the fit's
    row order): the block-by-term tests of `terms` (those the verdicts need) and the item
    records' estimates."""
    blocks = int(data["replicate"].nunique()) if "replicate" in data.columns else 1
    m = Model(response, fit, blocks)
    add_tests(m, terms if block_tests else [])
    items = item_records(data, response, rules)
    if items is not None:
        pinv = getattr(fit.result.model, "pinv_wexog", None)  # statsmodels keeps the design's pseudo-inverse
        if pinv is None:
            pinv = np.linalg.pinv(fit.X)
        params = pinv @ items.pseudo  # (p, G)
        resid = items.pseudo - fit.X @ params  # (n, G)
        inter = resid - resid.mean(axis=1, keepdims=True)  # the runs x groups interaction
        df_item = float(fit.result.df_resid) * (items.groups - 1)
        if df_item >= 1:
            m.items, m.group_params = items, params
            m.ms_item, m.df_item = float((inter ** 2).sum()) / df_item, df_item
    return m


def add_tests(m: Model, terms: list[tuple[str, ...]], block_errors: str = "own") -> None:
    """The block-by-term tests of `terms` the model lacks, each the term's own error unless
    the plan declares `block_errors: pooled` (BLOCK_ERRORS), and the residual of the rest: the
    pooled residual without the block-by-term parts judged on their own."""
    if block_errors == "test":  # older plans' preliminary-test rule, read under today's default
        block_errors = "own"
    if block_errors not in BLOCK_ERRORS:
        raise ValueError(f"block_errors: one of {', '.join(BLOCK_ERRORS)}, got {block_errors!r}")
    fit = m.fit
    if fit.block_cols is not None:
        for t in terms:
            if t in fit.slices and t not in m.tests and (bt := block_interaction(fit, t)) is not None:
                m.tests[t] = replace(bt, used=block_errors == "own")
    ss, df = float(fit.result.ssr), float(fit.result.df_resid)
    for test in m.tests.values():
        if test.used and fit.errors != "HC2":
            ss, df = ss - test.ms * test.q, df - test.q
    m.ms_rest, m.df_rest = (ss / df, df) if df >= 1 and ss > 0 else (m.sigma2, float(fit.result.df_resid))


def split_of(m: Model, terms: list[str] | None = None, noises: dict[str, TermNoise] | None = None) -> Split | None:
    """The response's noise split (module docstring), or None without item records. `noises`:
    the family terms' variances by source, for the items x term part the split reports."""
    if m.items is None or m.sigma2 <= 0:
        return None
    G = m.items.groups
    raw = m.ms_item / G / m.sigma2
    d1, d2 = m.df_item, float(m.fit.result.df_resid)
    low, high = raw / stats.f.ppf(0.975, d1, d2), raw / stats.f.ppf(0.025, d1, d2)
    item_term = {t: n.item_term for t, n in (noises or {}).items() if terms is None or t in terms}
    return Split(m.response, m.items.kind, m.items.method, G, m.items.items, math.sqrt(m.sigma2), min(raw, 1.0),
                 min(low, 1.0), min(high, 1.0), d1, d2, item_term,
                 {t: n.shares()["items x term"] for t, n in (noises or {}).items() if t in item_term})


def prompts_to_decide(v: Verdict, target: float = DECISION_POWER, most: float | None = None,
                      alpha_at: Callable[[float], float] | None = None) -> int | None:
    """The smallest multiple k of today's evaluation items (among PROMPT_FACTORS, and at most
    `most` where the plan caps it) with which the term is decided with probability `target`
    if its effect is as estimated (`TermNoise.at`), at the alpha* `alpha_at(k)` a look at
    those items would have (today's where None). None if none does."""
    if v.noise is None:
        return None
    for k in PROMPT_FACTORS:
        if most is not None and k > most:
            break
        se, df = v.noise.at(v.noise.blocks, k)
        a = v.alpha_star if alpha_at is None else alpha_at(k)
        if se > 0 and 0 < a < 1 and p_decided(v.estimate, se, df, a, v.margin) >= target:
            return k
    return None


def why_not_items(v: Verdict, most: float | None = None) -> str:
    """Why more evaluation items alone would not decide a term, in one clause."""
    k = min(PROMPT_FACTORS[-1], most) if most else PROMPT_FACTORS[-1]
    if v.noise is None:
        return "its noise has no item records"
    se, _ = v.noise.at(v.noise.blocks, k)
    seeds = math.sqrt(v.noise.seeds)
    if seeds >= se * 0.7:
        return f"more items alone would not (up to {k:g}x): the seeds' part of its se, {seeds:.3g}, stays"
    margin = f" and +-{v.margin:g}" if v.margin is not None else ""
    return (f"more items alone would not (up to {k:g}x): its se would fall to {se:.3g}, but its estimate "
            f"{v.estimate:+.3g} lies so near the boundaries (0{margin}) that it would stay undecided more than "
            f"{1 - DECISION_POWER:.0%} of the time")


@dataclass
class Split:
    """One response's noise, split."""
    response: str
    kind: str  # what a re-evaluation adds (`item_kinds.kind_of`: prompts, eval_batches, a workload's own, or "")
    method: str
    groups: int
    items: int
    sigma: float
    share: float  # the evaluation's (items x runs) share of the residual variance, in [0, 1]
    share_low: float  # its 95% interval
    share_high: float
    df_eval: float
    df_resid: float
    item_term: dict[str, float] = field(default_factory=dict)  # family term -> its items x term variance
    item_term_share: dict[str, float] = field(default_factory=dict)  # family term -> that part's share of its se^2

    @property
    def sigma_eval(self) -> float:
        return self.sigma * math.sqrt(max(self.share, 0.0))

    @property
    def sigma_seed(self) -> float:
        return self.sigma * math.sqrt(max(1.0 - self.share, 0.0))

    def predicted_ratio(self, k: float) -> tuple[float, float, float]:
        """The residual variance with k times the items over today's: (1 - s) + s / k, at the
        share's estimate and its interval's ends."""
        return tuple((1 - s) + s / k for s in (self.share, self.share_low, self.share_high))

    def text(self) -> str:
        head = (f"{self.response}: residual sigma {self.sigma:.3g}; the evaluation's share of its variance "
                f"{self.share:.0%} [95% CI {self.share_low:.0%}, {self.share_high:.0%}] ({self.items} {what(self.kind)}, "
                f"{self.method}); evaluation sigma {self.sigma_eval:.3g}, between seeds {self.sigma_seed:.3g}")
        big = {t: s for t, s in self.item_term_share.items() if s >= 0.05}
        if big:
            head += ("; items x term (the same items favour one arm in every block; more blocks do not shrink it): "
                     + ", ".join(f"{t} {s:.0%} of its se^2" for t, s in big.items()))
        return head
