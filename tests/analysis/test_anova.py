import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
from statsmodels.stats.anova import anova_lm

from analysis.anova import AnalysisError, anova_with_fit, factorial_anova


def unbalanced():
    rng = np.random.default_rng(1)
    rows = []
    sizes = {("a0", "b0"): 2, ("a1", "b0"): 5, ("a0", "b1"): 4, ("a1", "b1"): 3}
    for (a, b), n in sizes.items():
        for _ in range(n):
            y = 1.0 + (a == "a1") * 2.0 + (b == "b1") * 1.0 + (a == "a1") * (b == "b1") * 1.5 + rng.normal(0, 0.3)
            rows.append({"A": a, "B": b, "y": y})
    return pd.DataFrame(rows)


def test_type3_unbalanced_matches_effect_coding_not_treatment_coding():
    df = unbalanced()
    ours = factorial_anova(df, "y", ["A", "B"], typ=3)
    effect = anova_lm(smf.ols("y ~ C(A, Sum) * C(B, Sum)", df).fit(), typ=3)
    treat = anova_lm(smf.ols("y ~ C(A) * C(B)", df).fit(), typ=3)
    assert ours.loc["A", "sum_sq"] == pytest.approx(effect.loc["C(A, Sum)", "sum_sq"])
    assert ours.loc["B", "F"] == pytest.approx(effect.loc["C(B, Sum)", "F"])
    assert ours.loc["A:B", "sum_sq"] == pytest.approx(effect.loc["C(A, Sum):C(B, Sum)", "sum_sq"])
    # treatment coding tests simple effects at the reference level: a different answer
    assert abs(ours.loc["A", "sum_sq"] - treat.loc["C(A)", "sum_sq"]) > 1.0
    assert ours.loc["A:B", "sum_sq"] == pytest.approx(treat.loc["C(A):C(B)", "sum_sq"])  # highest order agrees


def test_type2_equals_type3_when_balanced_and_odd_names_work():
    rng = np.random.default_rng(2)
    rows = [{"C": c, "D1:x": d, "y": rng.normal() + (c == "hi")} for c in ("lo", "hi") for d in ("p", "q")
            for _ in range(3)]
    df = pd.DataFrame(rows)
    t2 = factorial_anova(df, "y", ["C", "D1:x"], typ=2)
    t3 = factorial_anova(df, "y", ["C", "D1:x"], typ=3)
    assert list(t2.index) == ["C", "D1:x", "C:D1:x", "Residual"]
    for term in ("C", "D1:x", "C:D1:x"):
        assert t2.loc[term, "sum_sq"] == pytest.approx(t3.loc[term, "sum_sq"])
        assert t2.loc[term, "partial_eta_sq"] == pytest.approx(
            t2.loc[term, "sum_sq"] / (t2.loc[term, "sum_sq"] + t2.loc["Residual", "sum_sq"]))


def test_block_term_is_reported():
    df = unbalanced().iloc[:12].copy()
    df["replicate"] = np.arange(len(df)) % 2
    t = factorial_anova(df, "y", ["A", "B"], block="replicate")
    assert "replicate" in t.index and t.loc["replicate", "df"] == 1


def test_fraction_drops_aliased_terms():
    rows = []
    for a in (-1, 1):
        for b in (-1, 1):
            for c in (-1, 1):
                d = a * b * c  # 2^(4-1), D = ABC
                for rep in range(2):
                    rows.append({"A": a, "B": b, "C": c, "D": d, "y": a + 0.5 * d + 0.01 * rep})
    df = pd.DataFrame(rows).astype({f: str for f in "ABCD"})
    t = factorial_anova(df, "y", list("ABCD"))
    assert {"A", "B", "C", "D"} <= set(t.index)
    assert "A:B:C" not in t.index  # aliased with D
    assert "A:B:C" in anova_with_fit(df, "y", list("ABCD"))[1].dropped


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.assign(y=1.0), "response 'y' is constant"),
    (lambda d: d.assign(A="a0"), "factor 'A' has one level"),
    (lambda d: d.iloc[[0, -1]], "too few runs"),
])
def test_refusals(mutate, message):
    df = mutate(unbalanced())
    with pytest.raises(AnalysisError, match=message):
        factorial_anova(df, "y", ["A", "B"])


def test_one_fit_per_response_serves_the_table_and_the_contrasts():
    """The ANOVA table and the verdicts' contrasts read the same OLS of a response: the second
    reader finds the first's fit, and its design is the contrasts' design row for row."""
    from analysis.anova import _ols
    from analysis.model import fit_response

    rng = np.random.default_rng(7)
    df = pd.DataFrame([{"A": a, "B": b, "replicate": str(r), "y": rng.normal() + (a == "hi")}
                       for a in ("lo", "hi") for b in ("x", "z") for r in range(3)])
    _ols.cache_clear()
    table, fit = anova_with_fit(df, "y", ["A", "B"], block="replicate")
    contrasts = fit_response(df, "y", ["A", "B"], "replicate")
    assert _ols.cache_info().misses == 1 and _ols.cache_info().hits == 1
    np.testing.assert_allclose(contrasts.result.model.exog, contrasts.X)
    np.testing.assert_allclose(np.asarray(contrasts.result.resid), fit.resid.to_numpy())
    other = df.assign(y=df["y"] * 2)
    assert fit_response(other, "y", ["A", "B"], "replicate").result is not contrasts.result
    assert _ols.cache_info().misses == 2
