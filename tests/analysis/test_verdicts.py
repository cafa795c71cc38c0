"""analysis.verdicts on constructed data whose answer is known, and against statsmodels:
TOST (`ttost_ind`), HC3 (`cov_type="HC3"`), the pooled OLS effects, Breusch-Pagan, the
leave-one-block-out check, sigma's interval and the planner's arithmetic."""

import itertools

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.weightstats import ttost_ind

from analysis.anova import AnalysisError
from analysis.effects import factorial_effects
from analysis.verdicts import (Contrast, blocks_to_decide, contrasts, decide, decide_all, fit_response,
                               margins_for, p_decided, parse_margins, sigma_interval)


def design(effects, sigma=0.05, replicates=3, seed=0, block_shift=0.02, sd_by=None):
    """A 2^3 factorial (A, B, C: levels lo/hi) with the given effects (high minus low) and
    a small block effect; `sd_by` = (factor, sd at lo, sd at hi) makes variances differ."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(replicates):
        for a, b, c in itertools.product((-1, 1), repeat=3):
            x = {"A": a, "B": b, "C": c}
            y = 3.0 + sum(e / 2 * np.prod([x[f] for f in t.split(":")]) for t, e in effects.items())
            sd = sigma if sd_by is None else sd_by[1 + (x[sd_by[0]] > 0)]
            rows.append({"A": "lo" if a < 0 else "hi", "B": "lo" if b < 0 else "hi", "C": "lo" if c < 0 else "hi",
                         "replicate": r, "y": y + block_shift * r + rng.normal(0, sd)})
    df = pd.DataFrame(rows)
    for f in "ABC":
        df[f] = pd.Categorical(df[f], categories=["lo", "hi"], ordered=True)
    return df


def verdicts(df, margin, **kw):
    d = decide_all(df, ["y"], list("ABC"), {"y": {"better": "higher", "margin": margin}}, **kw)
    return d, {v.term: v for v in d.of("y")}


def test_known_answers_matters_negligible_undecided():
    df = design({"A": 1.0, "B": 0.0, "C": 0.12}, sigma=0.05, replicates=4)
    d, v = verdicts(df, margin=0.1)
    assert d.family == 7 and d.alpha_star == pytest.approx(0.05 / 7)
    assert v["A"].verdict == "matters" and v["A"].ci_low > 0.9
    assert v["B"].verdict == "negligible" and -0.1 < v["B"].eq_low and v["B"].eq_high < 0.1
    # C's true effect sits just past the margin: detected, but not shown bigger or smaller
    assert v["C"].verdict == "matters" and v["C"].ci_low > 0 and v["C"].eq_high > 0.1
    wide = design({"A": 0.05}, sigma=0.3, replicates=2)
    _, w = verdicts(wide, margin=0.1)
    assert w["A"].verdict == "undecided" and w["A"].ci_low < 0 < w["A"].ci_high
    assert "undecided" in w["A"].text() and "more replicate block(s)" in w["A"].next_step


def test_negligible_and_detected_says_smaller_than_the_margin():
    c = Contrast("A", "lo -> hi", 0.03, 0.004, 20)
    v = decide(c, "y", 0.01, 0.1, "higher", 5)
    assert v.verdict == "negligible" and v.detected
    assert v.text().endswith("; detected, smaller than the margin")
    assert v.text().startswith("A: negligible within +-0.1 (lo -> hi: +0.03 [")


def test_no_margin_means_never_negligible():
    c = Contrast("A", "", 0.0, 0.001, 50)
    v = decide(c, "y", 0.01, None, "higher", 1)
    assert v.verdict == "undecided" and "no margin declared" in v.text()


def test_no_sentence_contradicts_its_interval():
    rng = np.random.default_rng(1)
    for seed in range(40):
        effects = {t: float(rng.normal(0, 0.15)) for t in ("A", "B", "C", "A:B")}
        df = design(effects, sigma=float(rng.uniform(0.02, 0.2)), replicates=int(rng.integers(2, 4)), seed=seed)
        _, v = verdicts(df, margin=float(rng.uniform(0.02, 0.3)))
        for t in v.values():
            text = t.text()
            assert text.startswith(f"{t.term}: {t.verdict}")
            if t.verdict == "matters":
                assert t.ci_low > 0 or t.ci_high < 0
                assert f"[{t.ci_low:+.4g}, {t.ci_high:+.4g}]" in text
            elif t.verdict == "negligible":
                assert -t.margin < t.eq_low and t.eq_high < t.margin
            else:
                assert t.ci_low <= 0 <= t.ci_high and not (-t.margin < t.eq_low and t.eq_high < t.margin)
                assert "not detected" not in text


def test_tost_matches_statsmodels_ttost_ind():
    """One two-level factor, no block: the contrast is the two-sample difference and TOST's
    p is statsmodels' (pooled variance)."""
    rng = np.random.default_rng(4)
    lo, hi = rng.normal(1.0, 0.1, 9), rng.normal(1.02, 0.1, 9)
    df = pd.DataFrame({"A": pd.Categorical(["lo"] * 9 + ["hi"] * 9, ["lo", "hi"], ordered=True),
                       "y": np.r_[lo, hi]})
    fit = fit_response(df, "y", ["A"], None, errors="OLS")
    (c,) = contrasts(fit, df, ["A"])
    assert c.estimate == pytest.approx(hi.mean() - lo.mean()) and c.df == 16
    for margin in (0.05, 0.1, 0.2):
        v = decide(c, "y", 0.05, margin, "higher", 1)
        p_sm = ttost_ind(hi, lo, -margin, margin, usevar="pooled")[0]
        assert v.p_equiv == pytest.approx(p_sm, rel=1e-9)
        assert (v.verdict == "negligible") == (p_sm < 0.05)


def test_pooled_errors_equal_the_effects_model_and_hc3_equals_statsmodels():
    df = design({"A": 0.5, "B": 0.2, "A:B": 0.1}, sd_by=("A", 0.02, 0.2), replicates=3, seed=2)
    fit = fit_response(df, "y", list("ABC"), "replicate", errors="OLS")
    ours = {c.term: c for c in contrasts(fit, df, list("ABC"))}
    eff = factorial_effects(df, "y", list("ABC"), block="replicate")
    for term in eff.index:
        assert ours[term].estimate == pytest.approx(eff.loc[term, "effect"], abs=1e-12)
        assert ours[term].se == pytest.approx(eff.loc[term, "se"], rel=1e-9)
    # HC3 from an independent parametrisation: the coded regression with block dummies
    hc3 = fit_response(df, "y", list("ABC"), "replicate", errors="HC3")
    assert hc3.errors == "HC3"
    theirs = {c.term: c for c in contrasts(hc3, df, list("ABC"))}
    X = pd.DataFrame({t: np.prod([np.where(df[f] == "hi", 1.0, -1.0) for f in t.split(":")], axis=0)
                      for t in eff.index})
    X = sm.add_constant(pd.concat([X, pd.get_dummies(df["replicate"], prefix="r", drop_first=True, dtype=float)],
                                  axis=1))
    sm_fit = sm.OLS(df["y"], X).fit(cov_type="HC3")
    for term in eff.index:
        assert theirs[term].se == pytest.approx(2 * sm_fit.bse[term], rel=1e-9)


def test_breusch_pagan_switches_to_hc3_only_where_variances_differ():
    same = fit_response(design({"A": 0.5}, sigma=0.1, replicates=4, seed=5), "y", list("ABC"), "replicate")
    differ = fit_response(design({"A": 0.5}, sd_by=("A", 0.01, 0.3), replicates=4, seed=5), "y", list("ABC"),
                          "replicate")
    assert same.errors == "OLS" and same.bp_p > 0.05
    assert differ.errors == "HC3" and differ.bp_p < 0.05
    d, _ = verdicts(design({"A": 0.5}, sd_by=("A", 0.01, 0.3), replicates=4, seed=5), margin=0.1)
    assert "HC3 errors: Breusch-Pagan p=" in d.checks["y"].text(d.alpha_star)


def test_one_block_carrying_a_verdict_is_fragile():
    df = design({"A": 0.0, "B": 0.02}, sigma=0.005, replicates=3, seed=0)
    df.loc[(df["replicate"] == 2) & (df["B"] == "hi"), "y"] += 0.1  # B's size comes from block 2
    d, v = verdicts(df, margin=0.03)
    assert v["B"].verdict == "matters" and v["B"].eq_high > 0.03
    assert v["B"].fragile == "without replicate block 2 it is undecided"
    assert v["B"].text().endswith("[fragile: without replicate block 2 it is undecided]")
    assert "1 verdict(s) fragile" in d.checks["y"].lobo
    assert "leave-one-block-out over 3 blocks" in d.checks["y"].lobo
    steady = design({"A": 1.0}, sigma=0.02, replicates=3, seed=7)
    _, w = verdicts(steady, margin=0.05)
    assert w["A"].verdict == "matters" and not w["A"].fragile
    two = design({"A": 1.0}, sigma=0.02, replicates=2, seed=7)
    d2, _ = verdicts(two, margin=0.05)
    assert "not checked" in d2.checks["y"].lobo


def test_three_level_factor_gives_every_pair_its_own_contrast():
    rng = np.random.default_rng(8)
    means = {"a": 1.0, "b": 1.3, "c": 1.05}
    rows = [{"L": lv, "B": b, "replicate": r, "y": means[lv] + (0.1 if b == "hi" else 0) + rng.normal(0, 0.01)}
            for r in range(3) for lv in means for b in ("lo", "hi")]
    df = pd.DataFrame(rows)
    df["L"] = pd.Categorical(df["L"], ["a", "b", "c"], ordered=True)
    df["B"] = pd.Categorical(df["B"], ["lo", "hi"], ordered=True)
    d = decide_all(df, ["y"], ["L", "B"], {"y": {"better": "higher", "margin": 0.1}})
    v = {x.term: x for x in d.of("y")}
    assert {"L[a->b]", "L[a->c]", "L[b->c]", "B", "L[a->b]:B", "L[a->c]:B", "L[b->c]:B"} == set(v)
    assert d.family == 7
    cell = df.groupby("L", observed=True)["y"].mean()
    assert v["L[a->b]"].estimate == pytest.approx(cell["b"] - cell["a"], abs=1e-9)
    assert v["L[a->b]"].verdict == "matters" and v["L[a->c]"].verdict in ("negligible", "matters")
    assert "pairwise contrasts" in d.method()


def test_sigma_interval_covers_the_true_sigma_at_its_level():
    rng = np.random.default_rng(9)
    hits = 0
    for _ in range(2000):
        s = np.sqrt(rng.chisquare(7) / 7)  # sigma 1, 7 df
        lo, hi = sigma_interval(s, 7)
        hits += lo <= 1.0 <= hi
    assert 0.93 < hits / 2000 < 0.97


def test_p_decided_matches_simulation_and_blocks_reach_the_target():
    rng = np.random.default_rng(10)
    for theta, se, margin in ((0.0, 0.03, 0.1), (0.08, 0.03, 0.1), (0.3, 0.1, 0.1)):
        est = rng.normal(theta, se, 200_000)
        t1, t2 = stats.t.ppf(1 - 0.01 / 2, 30), stats.t.ppf(1 - 0.01, 30)
        sim = np.mean((np.abs(est) > t1 * se) | ((est - t2 * se > -margin) & (est + t2 * se < margin)))
        assert p_decided(theta, se, 30, 0.01, margin) == pytest.approx(sim, abs=0.005)
    v = decide(Contrast("A", "", 0.02, 0.06, 7), "y", 0.01, 0.1, "higher", 5)
    k = blocks_to_decide(v, replicates=2, n_cells=8)
    assert k is not None and k >= 1
    prob = [p_decided(0.02, 0.06 * np.sqrt(2 / (2 + j)), 7 + 7 * j, 0.01, 0.1) for j in (k - 1, k)]
    assert prob[1] >= 0.8 and (k == 1 or prob[0] < 0.8)


def test_margins_come_from_the_spec_and_the_command_line():
    df = pd.DataFrame()
    df.attrs["responses"] = {"spec/tau": {"better": "higher", "margin": 0.1}}
    assert margins_for(df) == {"spec/tau": {"better": "higher", "margin": 0.1}}
    both = margins_for(df, {"spec/tau": 0.2, "val/bpb": 0.01})
    assert both["spec/tau"]["margin"] == 0.2 and both["val/bpb"] == {"better": "lower", "margin": 0.01}
    assert parse_margins(["spec/tau=0.05", "tf/accept@3=0.01"]) == {"spec/tau": 0.05, "tf/accept@3": 0.01}
    for bad in ("spec/tau", "spec/tau=0", "spec/tau=nan", "=0.1", "spec/tau=-1", "spec/tau=x"):
        with pytest.raises(AnalysisError, match="--margin"):
            parse_margins([bad])


def test_a_term_that_matters_is_coloured_by_the_way_it_moves_the_response():
    from analysis.report import VERDICT_COLOURS, verdict_colour
    from analysis.verdicts import Verdict

    def v(verdict, estimate, better):
        return Verdict(response="r", term="D1", label="D1", verdict=verdict, estimate=estimate, se=0.1, df=10,
                       alpha_star=0.01, ci_low=estimate - 0.1, ci_high=estimate + 0.1, eq_low=estimate - 0.05,
                       eq_high=estimate + 0.05, margin=0.5, better=better, p=0.001, p_adj=0.01, p_equiv=None,
                       detectable=0.2)

    assert verdict_colour(v("matters", +0.4, "higher")) == "better"  # tau up: good news, not red
    assert verdict_colour(v("matters", -0.4, "higher")) == "worse"
    assert verdict_colour(v("matters", -0.01, "lower")) == "better"  # ECE down
    assert verdict_colour(v("matters", +0.01, "lower")) == "worse"
    assert verdict_colour(v("negligible", +0.01, "lower")) == "negligible"
    assert verdict_colour(v("undecided", +0.3, "higher")) == "undecided"
    assert len(set(VERDICT_COLOURS.values())) == 4


def test_verdicts_without_the_fragility_refits_are_the_same_verdicts():
    """`plan` asks for the verdicts without the leave-one-block-out refits: every number is
    the same, only fragility is not checked (and says so)."""
    from analysis.verdicts import decide_all

    df = design({"A": 0.0, "B": 0.02}, sigma=0.005, replicates=3, seed=0)
    df.loc[(df["replicate"] == 2) & (df["B"] == "hi"), "y"] += 0.1
    margins = {"y": {"better": "higher", "margin": 0.03}}
    full = decide_all(df, ["y"], ["A", "B"], margins)
    quick = decide_all(df, ["y"], ["A", "B"], margins, fragility=False)
    key = lambda v: (v.term, v.verdict, v.estimate, v.se, v.df, v.blocks)  # noqa: E731
    assert [key(v) for v in quick.verdicts] == [key(v) for v in full.verdicts]
    assert any(v.fragile for v in full.verdicts) and not any(v.fragile for v in quick.verdicts)
    assert quick.checks["y"].lobo == "leave-one-block-out: not checked"
