"""Agreement with published two-level factorial analyses.

Sources:
- D. C. Montgomery, Design and Analysis of Experiments (8th ed., Wiley 2013), Example 6.1:
  the 2^2 chemical process (reactant concentration A, catalyst B), n = 3 replicates,
  response yield. Printed (Table 6.3 / section 6.2): effects A = 8.33, B = -5.00,
  AB = 1.67; SS A = 208.33, B = 75.00, AB = 8.33, error 31.34 on 8 df; F A = 53.19,
  B = 19.15, AB = 2.13; p B = 0.0024, AB = 0.1826.
- Montgomery, Example 6.2: the unreplicated 2^4 pilot-plant filtration rate (A temperature,
  B pressure, C formaldehyde, D stirring rate). Printed effects A = 21.625, B = 3.125,
  C = 9.875, D = 14.625, AC = -18.125, AD = 16.625, ...; Lenth's method (section 6.5):
  PSE = 2.625, ME = 6.75, SME = 13.70, active A, C, D, AC, AD. Projected into a replicated
  2^3 in A, C, D (Table 6.13): SS A = 1870.56, C = 390.06, D = 855.56, AC = 1314.06,
  AD = 1105.56, error 179.52 on 8 df, F A = 83.36, C = 17.38, D = 38.13, AC = 58.56, AD = 49.27.
"""

import pandas as pd
import pytest

from analysis.anova import factorial_anova
from analysis.effects import effects_with_levels, factorial_effects, lenth


def example_6_1():
    data = {("-", "-"): [28, 25, 27], ("+", "-"): [36, 32, 32], ("-", "+"): [18, 19, 23], ("+", "+"): [31, 30, 29]}
    rows = [{"A": a, "B": b, "rep": i, "y": v} for (a, b), vals in data.items() for i, v in enumerate(vals)]
    df = pd.DataFrame(rows)
    for f in "AB":
        df[f] = pd.Categorical(df[f], ["-", "+"], ordered=True)
    return df


def example_6_2():
    y = [45, 71, 48, 65, 68, 60, 80, 65, 43, 100, 45, 104, 75, 86, 70, 96]  # standard order
    rows = []
    for i, v in enumerate(y):
        rows.append({f: "+" if (i >> k) & 1 else "-" for k, f in enumerate("ABCD")} | {"y": v})
    df = pd.DataFrame(rows)
    for f in "ABCD":
        df[f] = pd.Categorical(df[f], ["-", "+"], ordered=True)
    return df


def test_replicated_2x2_effects_and_anova():
    df = example_6_1()
    eff = factorial_effects(df, "y", ["A", "B"], levels={"A": ("-", "+"), "B": ("-", "+")})
    assert eff.loc["A", "effect"] == pytest.approx(8.33, abs=0.005)
    assert eff.loc["B", "effect"] == pytest.approx(-5.00, abs=0.005)
    assert eff.loc["A:B", "effect"] == pytest.approx(1.67, abs=0.005)
    for typ in (2, 3):
        t = factorial_anova(df, "y", ["A", "B"], typ=typ)
        assert t.loc["A", "sum_sq"] == pytest.approx(208.33, abs=0.005)
        assert t.loc["B", "sum_sq"] == pytest.approx(75.00, abs=0.005)
        assert t.loc["A:B", "sum_sq"] == pytest.approx(8.33, abs=0.005)
        assert t.loc["Residual", "sum_sq"] == pytest.approx(31.34, abs=0.01)
        assert t.loc["Residual", "df"] == 8
        assert t.loc["A", "F"] == pytest.approx(53.19, abs=0.005)
        assert t.loc["B", "F"] == pytest.approx(19.15, abs=0.005)
        assert t.loc["A:B", "F"] == pytest.approx(2.13, abs=0.005)
        assert t.loc["B", "p"] == pytest.approx(0.0024, abs=0.00005)
        # printed 0.1826 is the p of the rounded F = 2.13; the exact F = 2.1277 gives 0.1828
        assert t.loc["A:B", "p"] == pytest.approx(0.1826, abs=0.0003)
        assert t.loc["A", "partial_eta_sq"] == pytest.approx(208.333 / (208.333 + 31.333), abs=1e-3)
    # the effect's t equals sqrt(F) of its ANOVA row in a 2-level design
    assert eff.loc["A", "t"] ** 2 == pytest.approx(53.19, abs=0.01)


def test_unreplicated_2_4_effects_and_lenth():
    df = example_6_2()
    lv = {f: ("-", "+") for f in "ABCD"}
    eff = factorial_effects(df, "y", list("ABCD"), levels=lv)
    printed = {"A": 21.625, "B": 3.125, "C": 9.875, "D": 14.625, "A:B": 0.125, "A:C": -18.125,
               "A:D": 16.625, "B:C": 2.375, "B:D": -0.375, "C:D": -1.125, "A:B:C": 1.875,
               "A:B:D": 4.125, "A:C:D": -1.625, "B:C:D": -2.625, "A:B:C:D": 1.375}
    assert set(eff.index) == set(printed)
    for term, value in printed.items():
        assert eff.loc[term, "effect"] == pytest.approx(value, abs=1e-9)
    assert eff["se"].isna().all()  # saturated: no residual, so no regression SE
    L = lenth(eff)
    assert L["pse"] == pytest.approx(2.625)
    assert L["me"] == pytest.approx(6.75, abs=0.005)
    assert L["sme"] == pytest.approx(13.70, abs=0.01)
    assert {k for k, v in L["active"].items() if v} == {"A", "C", "D", "A:C", "A:D"}


def test_projection_into_a_replicated_2_3():
    df = example_6_2()
    t = factorial_anova(df, "y", ["A", "C", "D"], typ=2)
    printed_ss = {"A": 1870.56, "C": 390.06, "D": 855.56, "A:C": 1314.06, "A:D": 1105.56, "C:D": 5.06, "A:C:D": 10.56}
    for term, ss in printed_ss.items():
        assert t.loc[term, "sum_sq"] == pytest.approx(ss, abs=0.005)
    assert t.loc["Residual", "sum_sq"] == pytest.approx(179.52, abs=0.03)
    assert t.loc["Residual", "df"] == 8
    for term, F in {"A": 83.36, "C": 17.38, "D": 38.13, "A:C": 58.56, "A:D": 49.27}.items():
        assert t.loc[term, "F"] == pytest.approx(F, abs=0.02)


def test_default_levels_follow_the_coding_not_the_row_order():
    df = example_6_1().iloc[::-1].copy()  # rows start at the high level
    df["A"] = df["A"].astype(str)  # plain strings: no category order to lean on
    df["B"] = df["B"].map({"-": -1, "+": 1})  # numeric coding
    eff, used = effects_with_levels(df, "y", ["A", "B"])
    assert used == {"A": ("-", "+"), "B": ("-1", "1")}
    assert eff.loc["A", "effect"] == pytest.approx(8.33, abs=0.005)
    assert eff.loc["B", "effect"] == pytest.approx(-5.00, abs=0.005)
