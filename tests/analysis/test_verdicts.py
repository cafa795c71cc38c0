"""analysis.verdicts on constructed data whose answer is known, and against statsmodels:
the four states, TOST (`ttost_ind`), HC2 (`cov_HC2`) with Bell-McCaffrey df (against the
n x n formula), the pooled OLS effects, the block-by-term F test (`anova_lm` of nested
models), the family of primary terms, simple effects, sigma's interval and the planner's
arithmetic."""

import itertools
import re

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.weightstats import ttost_ind

from analysis.anova import AnalysisError
from analysis.effects import factorial_effects
from analysis.result_types import BEYOND, Contrast, NEGLIGIBLE, SMALLER, UNDECIDED, UNSURE
from analysis.model import bm_df, fit_response, term_contrasts
from analysis.power import p_decided
from analysis.margins import margins_for, parse_margins
from analysis.verdict_notes import sigma_interval
from analysis.verdicts import blocks_to_decide, decide, decide_all, distance_to_boundary


def design(effects, sigma=0.05, replicates=4, seed=0, block_shift=0.02, sd_by=None):
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


def test_known_answers_in_the_four_states():
    df = design({"A": 1.0, "B": 0.0, "C": 0.10}, sigma=0.05, replicates=4)
    d, v = verdicts(df, margin=0.1)
    assert d.family == 3 and d.alpha_star == pytest.approx(0.05 / 3)  # the main effects; interactions outside
    assert v["A"].verdict == BEYOND and v["A"].eq_low > 0.1 and v["A"].in_family
    assert v["B"].verdict == NEGLIGIBLE and -0.1 < v["B"].eq_low and v["B"].eq_high < 0.1
    # C's true effect is the margin: detected, but its one-sided bound reaches inside it
    assert v["C"].verdict == UNSURE and v["C"].ci_low > 0 and v["C"].eq_low < 0.1
    assert not v["A:B"].in_family and v["A:B"].text().endswith("[outside the family]")
    wide = design({"A": 0.05}, sigma=0.3, replicates=2)
    _, w = verdicts(wide, margin=0.1)
    assert w["A"].verdict == UNDECIDED and w["A"].ci_low < 0 < w["A"].ci_high
    assert "undecided" in w["A"].text() and "more block(s)" in w["A"].next_step
    assert d.counts() == {BEYOND: 1, UNSURE: 1, NEGLIGIBLE: 1, UNDECIDED: 0}


def test_beyond_the_margin_is_the_one_sided_bound_not_the_estimate():
    """ECE D1 in the paper study: -0.0140 [-0.0205, -0.0075] against a margin of 0.01 matters,
    but its interval reaches inside the margin: size unsure, never "beyond"."""
    v = decide(Contrast("D1", "shifted -> aligned", -0.0140, 0.00154, 14), "conf/ece_mean", 0.05 / 9, 0.01,
               "lower", 9)
    assert v.verdict == UNSURE and v.eq_high > -0.01
    assert "reach inside +-0.01" in v.text() and "beyond" not in v.text().split("(", 1)[1]
    far = decide(Contrast("D1", "shifted -> aligned", -0.0300, 0.00154, 14), "conf/ece_mean", 0.05 / 9, 0.01,
                 "lower", 9)
    assert far.verdict == BEYOND and far.eq_high < -0.01 and "wholly beyond +-0.01" in far.text()


def test_negligible_and_detected_says_smaller_than_the_margin():
    c = Contrast("A", "lo -> hi", 0.03, 0.004, 20)
    v = decide(c, "y", 0.01, 0.1, "higher", 5)
    assert v.verdict == NEGLIGIBLE and v.detected and v.smaller_than_margin
    assert f"; {SMALLER}" in v.text()
    assert v.text().startswith("A: negligible within +-0.1 (lo -> hi: +0.03 [")


def test_no_margin_means_never_negligible_and_never_beyond():
    v = decide(Contrast("A", "", 0.0, 0.001, 50), "y", 0.01, None, "higher", 1)
    assert v.verdict == UNDECIDED and "no margin declared" in v.text()
    big = decide(Contrast("A", "", 1.0, 0.001, 50), "y", 0.01, None, "higher", 1)
    assert big.verdict == UNSURE and "no margin declared" in big.text()


def test_no_sentence_contradicts_its_interval():
    rng = np.random.default_rng(1)
    seen = set()
    for seed in range(40):
        effects = {t: float(rng.normal(0, 0.15)) for t in ("A", "B", "C", "A:B")}
        df = design(effects, sigma=float(rng.uniform(0.02, 0.2)), replicates=int(rng.integers(2, 6)), seed=seed)
        _, v = verdicts(df, margin=float(rng.uniform(0.02, 0.3)))
        for t in v.values():
            text, m = t.text(), t.margin
            lo, hi, _ = t.interval()
            seen.add(t.verdict)
            assert text.startswith(f"{t.term}: {t.verdict}") and f"[{lo:+.4g}, {hi:+.4g}]" in text
            if t.verdict == BEYOND:
                assert (t.ci_low > 0 or t.ci_high < 0) and (lo > m or hi < -m)
            elif t.verdict == UNSURE:
                assert (t.ci_low > 0 or t.ci_high < 0) and not (t.eq_low > m or t.eq_high < -m)
                assert not (-m < t.eq_low and t.eq_high < m)
            elif t.verdict == NEGLIGIBLE:
                assert -m < lo and hi < m
            elif t.df < 3:  # too few blocks to test: undecided whatever the interval, and its words say why
                assert "too few blocks to judge it" in text
            else:
                assert t.ci_low <= 0 <= t.ci_high and not (-m < t.eq_low and t.eq_high < m)
    assert seen == {BEYOND, UNSURE, NEGLIGIBLE, UNDECIDED}


def test_distance_to_the_boundary_in_standard_errors():
    t1, t2 = stats.t.ppf(1 - 0.01 / 2, 20), stats.t.ppf(1 - 0.01, 20)
    # an estimate of 5 se with a margin far away: nearest is the zero test's edge at t1 se
    assert distance_to_boundary(5.0, 1.0, 20, 0.01, 100.0) == pytest.approx(5 - t1)
    # just past the "beyond" edge margin + t2 se
    assert distance_to_boundary(10.3, 1.0, 20, 0.01, 7.0) == pytest.approx(abs(10.3 - (7 + t2)))
    v = decide(Contrast("A", "", 0.2, 0.05, 20), "y", 0.01, 0.1, "higher", 1)
    assert f"{v.to_boundary:.1f} se from the nearest boundary" in v.text()


def test_tost_matches_statsmodels_ttost_ind():
    """One two-level factor, no block: the contrast is the two-sample difference and TOST's
    p is statsmodels' (pooled variance)."""
    rng = np.random.default_rng(4)
    lo, hi = rng.normal(1.0, 0.1, 9), rng.normal(1.02, 0.1, 9)
    df = pd.DataFrame({"A": pd.Categorical(["lo"] * 9 + ["hi"] * 9, ["lo", "hi"], ordered=True),
                       "y": np.r_[lo, hi]})
    fit = fit_response(df, "y", ["A"], None, errors="pooled")
    (c,) = term_contrasts(fit, df, ["A"])
    assert c.estimate == pytest.approx(hi.mean() - lo.mean()) and c.df == 16
    for margin in (0.05, 0.1, 0.2):
        v = decide(c, "y", 0.05, margin, "higher", 1)
        p_sm = ttost_ind(hi, lo, -margin, margin, usevar="pooled")[0]
        assert v.p_equiv == pytest.approx(p_sm, rel=1e-9)
        assert (v.verdict == NEGLIGIBLE) == (p_sm < 0.05)


def _coded(df, terms):
    X = pd.DataFrame({t: np.prod([np.where(df[f] == "hi", 1.0, -1.0) for f in t.split(":")], axis=0)
                      for t in terms})
    return sm.add_constant(pd.concat([X, pd.get_dummies(df["replicate"], prefix="r", drop_first=True,
                                                        dtype=float).set_index(X.index)], axis=1))


def test_balanced_designs_use_pooled_errors_and_unbalanced_ones_hc2_as_statsmodels():
    df = design({"A": 0.5, "B": 0.2, "A:B": 0.1}, sd_by=("A", 0.02, 0.2), replicates=3, seed=2)
    fit = fit_response(df, "y", list("ABC"), "replicate")
    assert fit.errors == "pooled"  # balanced, although the variances differ
    ours = {c.term: c for c in term_contrasts(fit, df, list("ABC"))}
    eff = factorial_effects(df, "y", list("ABC"), block="replicate")
    for term in eff.index:
        assert ours[term].estimate == pytest.approx(eff.loc[term, "effect"], abs=1e-12)
        assert ours[term].se == pytest.approx(eff.loc[term, "se"], rel=1e-9)
        assert ours[term].df == fit.result.df_resid
    # a lost run unbalances it: HC2 (as statsmodels computes it on an independent parametrisation)
    gone = df.drop(index=[3]).reset_index(drop=True)
    hc2 = fit_response(gone, "y", list("ABC"), "replicate")
    assert hc2.errors == "HC2"
    theirs = {c.term: c for c in term_contrasts(hc2, gone, list("ABC"))}
    X = _coded(gone, list(eff.index))
    sm_fit = sm.OLS(gone["y"], X).fit(cov_type="HC2")
    for term in eff.index:
        assert theirs[term].se == pytest.approx(2 * sm_fit.bse[term], rel=1e-9)
        assert 1 <= theirs[term].df <= hc2.result.df_resid + 1e-9
    d, _ = verdicts(gone, margin=0.1)
    assert "HC2 errors with Satterthwaite df (unbalanced design)" in d.checks["y"].text()


def test_bell_mccaffrey_df_equals_the_n_by_n_formula():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.ones(14), rng.normal(size=(14, 3))])
    for _ in range(5):
        L = rng.normal(size=4)
        a = X @ np.linalg.solve(X.T @ X, L)
        H = X @ np.linalg.solve(X.T @ X, X.T)
        M = (np.eye(14) - H) @ np.diag(a ** 2 / (1 - np.diag(H))) @ (np.eye(14) - H)
        assert bm_df(X, L) == pytest.approx(np.trace(M) ** 2 / np.trace(M @ M), rel=1e-9)


def test_pooled_errors_are_unbiased_under_unequal_variances_in_a_balanced_design():
    """The claim behind dropping Breusch-Pagan: with every cell weighted alike, the pooled
    variance of a contrast averages the cells' variances, as the contrast's true variance does."""
    rng = np.random.default_rng(11)
    est, se2 = [], []
    for seed in range(300):
        df = design({"A": 0.3}, sd_by=("A", 0.02, 0.3), replicates=3, seed=int(rng.integers(1 << 30)))
        fit = fit_response(df, "y", list("ABC"), "replicate")
        c = next(c for c in term_contrasts(fit, df, list("ABC")) if c.term == "B")
        est.append(c.estimate)
        se2.append(c.se ** 2)
    assert np.mean(se2) == pytest.approx(np.var(est, ddof=1), rel=0.2)


def test_hc2_intervals_cover_at_their_level_in_an_unbalanced_design():
    rng = np.random.default_rng(12)
    hits = 0
    n = 300
    for _ in range(n):
        df = design({"A": 0.3}, sd_by=("A", 0.02, 0.3), replicates=3, seed=int(rng.integers(1 << 30)))
        df = df.drop(index=[0, 9]).reset_index(drop=True)
        fit = fit_response(df, "y", list("ABC"), "replicate")
        c = next(c for c in term_contrasts(fit, df, list("ABC")) if c.term == "A")
        half = stats.t.ppf(0.975, c.df) * c.se
        hits += abs(c.estimate - 0.3) <= half
    assert hits / n >= 0.92


def test_the_block_by_term_test_is_anova_of_nested_models_and_names_an_uneven_term():
    df = design({"A": 0.0, "B": 0.05}, sigma=0.005, replicates=3, seed=0)
    df.loc[(df["replicate"] == 2) & (df["B"] == "hi"), "y"] += 0.1  # B's size comes from block 2
    d, v = verdicts(df, margin=0.03)
    assert v["B"].block is not None and v["B"].block.p < 0.001 and "differs between blocks" in v["B"].text()
    assert v["A"].block.p > 0.01
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    data = pd.DataFrame({"a": df["A"].astype(str), "b": df["B"].astype(str), "c": df["C"].astype(str),
                         "r": df["replicate"].astype(str), "y": df["y"]})
    small = smf.ols("y ~ C(a, Sum) * C(b, Sum) * C(c, Sum) + C(r, Sum)", data).fit()
    big = smf.ols("y ~ C(a, Sum) * C(b, Sum) * C(c, Sum) + C(r, Sum) + C(b, Sum):C(r, Sum)", data).fit()
    table = anova_lm(small, big)
    assert v["B"].block.F == pytest.approx(table["F"].iloc[1], rel=1e-8)
    assert v["B"].block.q == 2 and v["B"].block.df == big.df_resid


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
    assert d.family == 4 and all(v[t].in_family for t in ("L[a->b]", "L[a->c]", "L[b->c]", "B"))
    cell = df.groupby("L", observed=True)["y"].mean()
    assert v["L[a->b]"].estimate == pytest.approx(cell["b"] - cell["a"], abs=1e-9)
    assert v["L[a->b]"].verdict == BEYOND and v["L[a->c]"].verdict in (NEGLIGIBLE, UNSURE, BEYOND)
    assert "pairwise contrasts" in d.method()


def test_the_family_is_primary_responses_times_primary_terms():
    df = design({"A": 1.0, "A:B": 0.3}, sigma=0.05, replicates=3)
    df["z"] = df["y"] * 2
    margins = {"y": {"better": "higher", "margin": 0.1}}
    d = decide_all(df, ["y", "z"], list("ABC"), margins, primary_terms=["A", "A:B"])
    assert d.family == 2 and d.alpha_star == pytest.approx(0.025)
    assert {(v.response, v.term) for v in d.family_verdicts()} == {("y", "A"), ("y", "A:B")}
    assert all(not v.in_family for v in d.of("z"))  # a secondary response, at the same alpha*
    assert all(v.alpha_star == d.alpha_star for v in d.verdicts)
    with pytest.raises(AnalysisError, match="none of the primary terms"):
        decide_all(df, ["y"], list("ABC"), margins, primary_terms=["D"])
    # the settings object and its fields by name are one way in; a name it lacks is refused
    from analysis.verdicts import DecideSettings
    by_object = decide_all(df, ["y", "z"], list("ABC"), margins, 0.05, DecideSettings(primary_terms=["A", "A:B"]))
    assert by_object.table().equals(d.table())
    assert decide_all(df, ["y"], list("ABC"), margins, how=DecideSettings(adjust="none")).alpha_star == 0.05
    with pytest.raises(TypeError, match="primary_term"):
        decide_all(df, ["y"], list("ABC"), margins, primary_term=["A"])


def test_simple_effects_are_the_cell_differences_at_each_level_of_the_others():
    df = design({"A": 1.0, "A:B": 0.6}, sigma=0.02, replicates=3)
    d = decide_all(df, ["y"], list("ABC"), {"y": {"better": "higher", "margin": 0.1}})
    simple = [s for s in d.simple if s.term == "A"]
    assert len(simple) == 4 and all(not s.verdict.in_family for s in simple)
    means = df.groupby(["A", "B", "C"], observed=True)["y"].mean()
    for s in simple:
        at = dict(part.split("=") for part in s.at.split(", "))
        diff = means[("hi", at["B"], at["C"])] - means[("lo", at["B"], at["C"])]
        assert s.verdict.estimate == pytest.approx(diff, abs=1e-9)
    # A's effect is 1.0 - 0.6 = 0.4 where B is lo and 1.6 where B is hi: beyond the margin at every level
    assert {s.verdict.verdict for s in simple} == {BEYOND}


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
    from trials.sweep_record import SweepRecord

    from trials.workload import load_workload

    record = SweepRecord(responses={"spec/tau": {"better": "higher", "margin": 0.1}})
    assert margins_for(record) == {"spec/tau": {"better": "higher", "margin": 0.1}}
    both = margins_for(record, {"spec/tau": 0.2, "val/bpb": 0.01}, load_workload("dspark").registry)  # the sweep's rules
    assert both["spec/tau"]["margin"] == 0.2 and both["val/bpb"] == {"better": "lower", "margin": 0.01}
    assert parse_margins(["spec/tau=0.05", "tf/accept@3=0.01"]) == {"spec/tau": 0.05, "tf/accept@3": 0.01}
    for bad in ("spec/tau", "spec/tau=0", "spec/tau=nan", "=0.1", "spec/tau=-1", "spec/tau=x", "spec/tau=0%",
                "spec/tau=inf"):
        with pytest.raises(AnalysisError, match="--margin"):
            parse_margins([bad])


def test_a_term_that_matters_is_coloured_by_the_way_it_moves_the_response():
    from analysis.rendering.answer_grid import VERDICT_COLOURS, verdict_colour
    from analysis.result_types import Verdict

    def v(verdict, estimate, better):
        return Verdict(response="r", term="D1", label="D1", verdict=verdict, estimate=estimate, se=0.1, df=10,
                       alpha_star=0.01, ci_low=estimate - 0.1, ci_high=estimate + 0.1, eq_low=estimate - 0.05,
                       eq_high=estimate + 0.05, margin=0.5, better=better, p=0.001, p_adj=0.01, p_equiv=None,
                       detectable=0.2, to_boundary=1.0)

    assert verdict_colour(v(BEYOND, +0.4, "higher")) == "better"  # tau up: good news, not red
    assert verdict_colour(v(BEYOND, -0.4, "higher")) == "worse"
    assert verdict_colour(v(UNSURE, -0.01, "lower")) == "better, size unsure"  # ECE down, size unsure
    assert verdict_colour(v(UNSURE, +0.01, "lower")) == "worse, size unsure"
    assert verdict_colour(v(NEGLIGIBLE, +0.01, "lower")) == "negligible"
    assert verdict_colour(v(UNDECIDED, +0.3, "higher")) == "undecided"
    assert len(set(VERDICT_COLOURS.values())) == 6


def test_a_named_contrast_is_the_difference_of_two_settings_in_a_half_fraction():
    """The seed's operating point: K 7 with decay 7 against K 4 with decay 4, in a resolution V
    2^(5-1) (E = ABCD). The fraction's 16 cells fit the main effects and two-factor
    interactions exactly, so the contrast is the mean of the runs at one setting minus the
    mean at the other, and (the two-factor interactions averaging out) the sum of the two
    main effects; its pooled error is sigma * sqrt(1/n + 1/n)."""
    rng = np.random.default_rng(3)
    effects = {"A": 0.2, "D": 0.5, "E": -0.3, "D:E": 0.4, "A:B": 0.1}
    rows = []
    for r in range(4):
        for a, b, c, d_ in itertools.product((-1, 1), repeat=4):
            x = {"A": a, "B": b, "C": c, "D": d_, "E": a * b * c * d_}
            y = 1.0 + sum(e / 2 * np.prod([x[f] for f in t.split(":")]) for t, e in effects.items())
            rows.append({**{f: "lo" if v < 0 else "hi" for f, v in x.items()}, "replicate": r,
                         "y": y + 0.03 * r + rng.normal(0, 0.05)})
    df = pd.DataFrame(rows)
    for f in "ABCDE":
        df[f] = pd.Categorical(df[f], categories=["lo", "hi"], ordered=True)
    sides = {"from": {"D": "lo", "E": "lo"}, "to": {"D": "hi", "E": "hi"}}
    d = decide_all(df, ["y"], list("ABCDE"), {"y": {"better": "higher", "margin": 0.1}},
                   contrasts={"diagonal": sides}, primary_terms=["diagonal", "D", "E"], block_errors="pooled")
    v = {x.term: x for x in d.of("y")}
    # by default each term it spans brings its own block x term error: D's and E's parts add up
    own = {x.term: x for x in decide_all(df, ["y"], list("ABCDE"), {"y": {"better": "higher", "margin": 0.1}},
                                         contrasts={"diagonal": sides}, primary_terms=["diagonal", "D", "E"]).of("y")}
    assert own["diagonal"].se ** 2 == pytest.approx(own["D"].se ** 2 + own["E"].se ** 2, rel=1e-9)
    assert own["D"].errors == "block x term" and own["D"].df == pytest.approx(3)
    assert d.family == 3 and v["diagonal"].in_family and v["diagonal"].label == "D=lo, E=lo -> D=hi, E=hi"
    hi = df[(df.D == "hi") & (df.E == "hi")]["y"].mean()
    lo = df[(df.D == "lo") & (df.E == "lo")]["y"].mean()
    assert v["diagonal"].estimate == pytest.approx(hi - lo, abs=1e-9)
    assert v["diagonal"].estimate == pytest.approx(v["D"].estimate + v["E"].estimate, abs=1e-9)
    assert v["diagonal"].estimate == pytest.approx(0.5 - 0.3, abs=0.06)
    fit = fit_response(df, "y", list("ABCDE"), "replicate")
    n = len(df) / 4  # the runs at each side
    assert v["diagonal"].se == pytest.approx(np.sqrt(fit.result.mse_resid * 2 / n), rel=1e-9)
    assert v["diagonal"].verdict == BEYOND
    # with no primary terms named, a named contrast is in the default family
    assert decide_all(df, ["y"], list("ABCDE"), {"y": {"better": "higher", "margin": 0.1}},
                      contrasts={"diagonal": sides}).family == 6


def _as_drafter_runs(df) -> None:
    """A design's rows as a drafter-stage sweep's runs: cell, run name, run order, stage."""
    df["cell"] = [f"A={a}|B={b}|C={c}" for a, b, c in zip(df.A, df.B, df.C)]
    df["run_name"] = df["cell"] + " r" + df["replicate"].astype(str)
    df["run_order"] = range(len(df))
    df["parallel_stage"] = "drafter"


def test_the_caveats_stand_beside_the_verdicts_they_qualify(tmp_path):
    """A term whose effect differs between blocks, and a ratio below its break-even in every
    arm (speculative decoding slower than autoregressive): the first screen, the HTML
    report's first table and the parent run's note say so beside the verdicts."""
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.rendering.words import parent_note
    from analysis.report import build_report

    df = design({"A": 0.2, "B": 0.0}, sigma=0.01, replicates=6, seed=4)
    shift = {r: s for r, s in enumerate((0.3, -0.3, 0.25, -0.2, 0.35, -0.35))}  # each block favours A its own way
    df["y"] += [shift[r] * (0.5 if a == "hi" else -0.5) for r, a in zip(df["replicate"], df["A"])]
    df["spec/tau"] = df.pop("y")
    df["spec/speedup"] = 0.8 + 0.01 * (df["B"] == "hi") + np.random.default_rng(1).normal(0, 0.01, len(df))
    _as_drafter_runs(df)
    sweep = SweepFrame(df, factors=list("ABC"), record=SweepRecord(experiment="caveats", responses={
        "spec/tau": {"better": "higher", "margin": 0.1}, "spec/speedup": {"better": "higher", "margin": 0.05}}))
    rep = build_report(sweep, tmp_path)
    a = next(v for v in rep.decision.of("spec/tau") if v.term == "A")
    assert a.block.used and a.caveat().startswith("its effect differs by block (p ")
    assert "^ A: its effect differs by block (p " in rep.brief
    assert "note: every arm's spec/speedup is below 1 (at most 0.8" in rep.brief
    assert "speculative decoding is slower than autoregressive" in rep.brief
    page = (tmp_path / "report.html").read_text()
    first = page.split("<table class='t verdicts'>", 1)[1].split("<p class='key'>", 1)[0]
    assert "its effect differs by block" in first and "slower than autoregressive" in first
    note = parent_note(rep, sweep)
    assert "its effect differs by block" in note and "slower than autoregressive" in note


def test_a_drift_the_model_misses_is_said_beside_the_verdicts():
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.report import build_report

    df = design({"A": 0.5}, sigma=0.01, replicates=4, seed=2)
    df["cell"] = [f"A={a}|B={b}|C={c}" for a, b, c in zip(df.A, df.B, df.C)]
    position = np.concatenate([np.random.default_rng(r).permutation(8) for r in range(4)])  # randomised order
    df["run_order"] = 8 * df["replicate"] + position
    df["spec/tau"] = df.pop("y") + 0.02 * position  # a trend within every block
    df["parallel_stage"] = "drafter"
    sweep = SweepFrame(df, factors=list("ABC"), record=SweepRecord(
        experiment="drift", responses={"spec/tau": {"better": "higher", "margin": 0.1}}))
    rep = build_report(sweep, None)
    assert any("drift over the run order" in c for c in rep.decision.caveats["spec/tau"])
    assert "note: its residuals drift over the run order" in rep.brief


def test_a_timing_pass_with_busy_rounds_is_a_caveat_beside_its_response(tmp_path):
    """The parent's `timing` tag counts the run-rounds the pass found busy
    (`trials.timing.timing_pass.busy_rounds`): the timed response's verdicts carry it, with the command
    to time again; a pass with none, or one recorded before the check, adds nothing."""
    import json
    from dataclasses import replace
    from trials.export import SweepFrame

    from trials.sweep_record import SweepRecord
    from analysis.report import build_report

    df = design({"A": 0.2, "B": 0.0}, sigma=0.01, replicates=3, seed=4)
    df["spec/tau"] = df.pop("y")
    df["spec/speedup"] = 1.2 + 0.1 * (df["A"] == "hi") + np.random.default_rng(1).normal(0, 0.01, len(df))
    _as_drafter_runs(df)
    record = SweepRecord(experiment="busy", responses={"spec/tau": {"better": "higher", "margin": 0.1},
                                                       "spec/speedup": {"better": "higher", "margin": 0.05}})
    said = "3 run-round(s) of the timing pass behind it depart from their run's median round by more than half"
    for timing, shown in [(json.dumps({"id": "p", "response": "spec/speedup", "busy": 3}), True),
                          (json.dumps({"id": "p", "response": "spec/speedup", "busy": 0}), False),
                          (json.dumps({"id": "p", "response": "spec/speedup"}), False), ("", False)]:
        rep = build_report(SweepFrame(df.copy(), factors=list("ABC"), record=replace(record, timing=timing)), None)
        caveats = rep.decision.caveats.get("spec/speedup", [])
        assert any(said in c for c in caveats) == shown, caveats
        assert (said in rep.brief) == shown and not any(said in c for c in rep.decision.caveats.get("spec/tau", []))
    assert "time it again on a quiet machine: trials time busy --again --rounds 3 --prompts 2 (the verdicts" in " ".join(
        build_report(SweepFrame(df.copy(), factors=list("ABC"), record=replace(record, timing=json.dumps(
            {"response": "spec/speedup", "busy": 3, "rounds": 3, "prompts": 2}))), None).decision.caveats["spec/speedup"])


def test_a_relative_margin_is_that_share_of_the_reference_mean_and_says_so(tmp_path, capsys):
    """`margin: 10%`: the analysis resolves it on the runs (the control's mean where the sweep
    has a control, else every factorial run's) and states the share and the mean beside
    the number wherever the margin is shown; validate says what it will resolve to."""
    import math

    import pandas as pd

    from analysis.anova import AnalysisError
    from analysis.cli import main
    from trials.sweep_record import SweepRecord
    from analysis.margins import margins_for
    from trials.store.record import margin_problem, relative_margin
    from trials.tracking import open_ledger
    from trials.validate import parse

    assert relative_margin("10%") == pytest.approx(0.1) and relative_margin(" 2.5% ") == pytest.approx(0.025)
    for bad in ("10", "0%", "-5%", "nan%", "ten%", "1000%", 0.1):
        assert relative_margin(bad) is None, bad
    assert margin_problem("10%") is None and "a percentage of the reference mean" in margin_problem("ten%")
    runs = pd.DataFrame({"arm": ["factorial"] * 4 + ["control=c"] * 2, "y": [2.0, 4.0, 2.0, 4.0, 10.0, 14.0]})
    rec = SweepRecord(responses={"y": {"better": "lower", "margin": "10%"}})
    got = margins_for(rec, runs=runs)["y"]
    assert got["margin"] == pytest.approx(1.2) and got["of"] == "10% of the control's mean 12"
    got = margins_for(rec, runs=runs[runs["arm"] == "factorial"])["y"]
    assert got["margin"] == pytest.approx(0.3) and got["of"] == "10% of the runs' mean 3"
    with pytest.raises(AnalysisError, match="needs a finite, non-zero mean"):
        margins_for(rec, runs=runs.assign(y=0.0))
    # the CLI's --margin takes a share too, resolved the same way
    assert parse_margins(["y=10%"]) == {"y": "10%"}
    got = margins_for(SweepRecord(), parse_margins(["y=10%"]), runs=runs)["y"]
    assert got["margin"] == pytest.approx(1.2) and got["of"] == "10% of the control's mean 12"
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = parse({"name": "rel", "base": {"preset": "tiny"}, "replicates": 4,
                  "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}},
                  "responses": {"spec/tau": {"better": "higher", "margin": "10%"}}})
    assert spec.responses["spec/tau"]["margin"] == "10%"
    ledger, rng = open_ledger(uri, spec), np.random.default_rng(0)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {"target_hash": "0" * 16})
        ledger.log_metrics(run_id, {"spec/tau": 3.0 + 0.02 * (t.levels["D1"] == "aligned") + rng.normal(0, 0.01)},
                           step=1)
        ledger.finish(run_id, "FINISHED", None)
    ledger.finish(ledger.parent_id, "FINISHED")
    assert main(["report", "rel", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--no-log"]) == 0
    out = capsys.readouterr().out
    said = re.search(r"margin \+-(\S+) \(10% of the runs' mean (\S+)\)", out)
    assert said and math.isclose(float(said.group(1)), 0.1 * float(said.group(2).rstrip(")")), rel_tol=1e-3), out
    assert "D1" in out and "negligible" in out  # +0.02 against a margin of about 0.3
