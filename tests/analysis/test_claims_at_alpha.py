"""Every claim at its alpha (issue 56): "detected" is a two-sided rejection at alpha*, the
group-sequential levels hold for the t statistics the looks compute, simple effects stand on
their main effect's error model, a switch that changed nothing is named, the drift check reads
the verdicts' model, a relative margin is resolved once, df move smoothly, the confirmations
of one screening are a family, and a look replays only on the data it saw."""

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.boundaries import nominal_levels, spent, t_levels
from analysis.result_types import NEGLIGIBLE, SMALLER, UNDECIDED, Contrast
from analysis.verdicts import decide, decide_all

ALPHA = 0.05


def paired_path_rate(levels, blocks, n=400_000, seed=5):
    """The chance that a sequential paired t (the own error of a two-level term: b - 1 df at b
    blocks) crosses the given nominal levels at any of its looks, by a simulation of its own."""
    rng = np.random.default_rng(seed)
    d = rng.standard_normal((n, blocks[-1]))
    hit = np.zeros(n, bool)
    for level, b in zip(levels, blocks):
        x = d[:, :b]
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / np.sqrt(b))
        hit |= np.abs(t) >= stats.t.isf(level / 2, b - 1)
    return hit.mean(), np.sqrt(ALPHA / 3 / n)


def test_t_levels_hold_the_spent_alpha_where_normal_levels_exceed_it():
    """Looks at 4, 5 and 6 of 6 blocks, t on 3, 4, 5 df, alpha* 0.05 / 3: the normal boundaries'
    nominal levels applied to the t statistics spend 1.05 x alpha*; the levels calibrated to
    the df spend alpha* (an independent simulation of the paired t, within 3 Monte Carlo errors)."""
    a, blocks = ALPHA / 3, [4, 5, 6]
    ts = [b / 6 for b in blocks]
    calibrated, _ = paired_path_rate(t_levels(ts, [b - 1 for b in blocks], a, 2), blocks)
    normal, mc = paired_path_rate(nominal_levels(ts, a, 2), blocks)
    assert abs(calibrated - a) < 3 * mc, calibrated
    assert normal > a + 3 * mc, normal


def test_the_first_look_is_exact_and_fewer_df_never_spend_more():
    assert t_levels([0.4], [3], 0.01, 2) == [pytest.approx(spent(0.4, 0.01), rel=1e-12)]
    ts = [0.5, 0.75, 1.0]
    at_more, at_floor = t_levels(ts, [4.0, 6.0, 8.0], 0.01), t_levels(ts, [4.9, 6.9, 8.9], 0.01)
    # 8.9 df calibrate as 8 (floored) and read the level off 8.9: the boundary is 8 df's
    assert at_floor[-1] <= at_more[-1] * 1.001
    assert stats.t.isf(at_floor[-1] / 2, 8.9) == pytest.approx(stats.t.isf(at_more[-1] / 2, 8), rel=1e-9)
    assert t_levels(ts, [4.0, 6.0, 8.0], 0.01) == at_more  # fixed seed: a report rebuilds to the same levels
    assert t_levels(ts, [1e7] * 3, 0.01) == nominal_levels(ts, 0.01)  # normal statistics: the exact recursion
    with pytest.raises(ValueError, match="one df per look"):
        t_levels(ts, [4.0], 0.01)


def test_detected_is_a_rejection_of_zero_at_alpha_star_not_the_tost_interval():
    """An estimate whose (1 - 2 alpha*) interval excludes zero while its (1 - alpha*) interval
    does not: negligible, and no word that asserts an effect."""
    se, df, a = 0.1, 50, 0.05
    t1, t2 = stats.t.isf(a / 2, df), stats.t.isf(a, df)
    est = se * (t1 + t2) / 2  # between the two critical values
    v = decide(Contrast("A", "lo -> hi", est, se, df), "y", a, 1.0, "higher", 1)
    assert v.verdict == NEGLIGIBLE and v.eq_low > 0 and v.ci_low < 0
    assert not v.smaller_than_margin and not v.asserts_effect and SMALLER not in v.text()
    w = decide(Contrast("A", "lo -> hi", se * (t1 + 0.1), se, df), "y", a, 1.0, "higher", 1)
    assert w.verdict == NEGLIGIBLE and w.smaller_than_margin and w.asserts_effect
    assert f"{SMALLER} (zero outside [" in w.text()


def two_factor(blocks, interaction, seed=0, noise=0.01):
    """D1 x D2 in `blocks` blocks, every block favouring D1 its own way (`interaction`: the sd
    of D1's effect from block to block), no true effect of D1 or D2."""
    rng = np.random.default_rng(seed)
    rows = []
    for b in range(blocks):
        swing = rng.normal(0, interaction)
        for d1, d2 in itertools.product(("lo", "hi"), repeat=2):
            y = 1.0 + (swing / 2 if d1 == "hi" else -swing / 2) + rng.normal(0, noise)
            rows.append({"D1": d1, "D2": d2, "replicate": b, "y": y})
    df = pd.DataFrame(rows)
    for f in ("D1", "D2"):
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    return df


def test_simple_effects_stand_on_the_error_of_their_main_effect():
    """A block x D1 interaction: D1 on its own error is wide; its simple effects (D1 at each
    level of D2) are judged on the same model (each part on its own block x term error), not
    on the pooled residual, so none claims to matter where the main effect cannot."""
    df = two_factor(6, 1.0, seed=3)
    d = decide_all(df, ["y"], ["D1", "D2"], {"y": {"better": "higher", "margin": 0.2}})
    main = next(v for v in d.of("y") if v.term == "D1")
    assert main.verdict == UNDECIDED and main.errors == "block x term"
    simple = [s.verdict for s in d.simple if s.term == "D1"]
    assert len(simple) == 2
    for v in simple:
        assert v.errors == "block x term" and not v.matters
        assert v.se >= 0.9 * main.se  # a cell difference is no surer than the average of two
    # every term a simple effect spans is on its own error, D1:D2 too (it was on the pooled rest)
    from analysis.verdicts import response_models

    ms = response_models(df, ["y"], ["D1", "D2"])
    decide_all(df, ["y"], ["D1", "D2"], {"y": {"better": "higher", "margin": 0.2}}, models=ms)
    assert ms.models["y"].tests[("D1", "D2")].used


def test_simple_effects_on_too_few_blocks_are_not_tested():
    df = two_factor(2, 1.0, seed=1)
    d = decide_all(df, ["y"], ["D1", "D2"], {"y": {"better": "higher", "margin": 0.2}}, levels=lambda r, a, df=None:
                   (a, a, 1))
    assert all(s.verdict.verdict == UNDECIDED and s.verdict.untested for s in d.simple)


def test_a_factor_whose_levels_changed_nothing_is_named_not_called_negligible():
    df = two_factor(5, 0.0, seed=2, noise=0.05)
    df["y"] = df.groupby(["replicate", "D2"], observed=True)["y"].transform("first")  # D1 never read
    d = decide_all(df, ["y"], ["D1", "D2"], {"y": {"better": "higher", "margin": 0.2}})
    v = next(v for v in d.of("y") if v.term == "D1")
    assert v.identical and v.verdict == UNDECIDED
    assert v.text().startswith("D1: undecided: its levels changed nothing")
    assert "check that the trainer reads what D1 sets" in v.text()
    assert not next(v for v in d.of("y") if v.term == "D2").identical


def test_the_drift_check_reads_the_model_the_verdicts_used():
    """A response made of a block x D1 interaction alone, run so that in every block D1's
    favoured level runs last: the ANOVA's residuals (no interaction) drift over the run
    order; the verdicts' model, which judges D1 on its own block x term error, fits it
    exactly, so no drift is flagged."""
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.diagnostics import drift_check
    from analysis.attribution import analyse
    from analysis.report import build_report

    rows = []
    for b, swing in enumerate((0.4, -0.3, 0.5, -0.6, 0.2, -0.2)):
        cells = sorted(itertools.product(("lo", "hi"), repeat=2), key=lambda c: (c[0] == "hi") == (swing > 0))
        for i, (d1, d2) in enumerate(cells):
            rows.append({"D1": d1, "D2": d2, "replicate": b, "run_order": 4 * b + i, "parallel_stage": "drafter",
                         "spec/tau": 2.0 + 0.1 * b + (swing / 2 if d1 == "hi" else -swing / 2)})
    df = pd.DataFrame(rows)
    for f in ("D1", "D2"):
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    df["cell"] = "D1=" + df["D1"].astype(str) + "|D2=" + df["D2"].astype(str)
    res = analyse(df, ["spec/tau"], ["D1", "D2"], block="replicate", adjust="none")["spec/tau"]
    slope, p = drift_check(df, res)
    assert p < 0.01  # what the check said when it ignored the interaction
    sweep = SweepFrame(df, factors=["D1", "D2"], record=SweepRecord(
        experiment="bxt", responses={"spec/tau": {"better": "higher", "margin": 0.1}}))
    rep = build_report(sweep, None)
    assert "spec/tau" not in rep.drift
    assert not any("drift" in c for c in rep.decision.caveats.get("spec/tau", []))


def test_df_move_smoothly_as_the_items_x_term_part_vanishes():
    """The Satterthwaite df of a term with a tiny items x term part are those of its run-level
    part, not half of them."""
    from analysis.variance import Model

    class Fit:  # the least of a fit a variance model's noise reads
        errors = "pooled"

        class result:
            normalized_cov_params = np.eye(2)
            mse_resid = 1.0
            df_resid = 129.0

        slices = {}
        block_cols = None

    class Items:
        groups = 16

    L = np.array([0.0, 1.0])
    dfs = []
    for extra in (0.0, 1e-3, 1e-2):
        m = Model("y", Fit(), 130, ms_rest=1.0, df_rest=129.0, ms_item=16 * 0.5, df_item=129.0 * 15)
        m.items = Items()
        m.group_params = np.zeros((2, 16))
        # each group's contrast spread so that var_jack = e_part (no items x term) plus `extra` of se^2
        e_part = 1.0 * 0.5
        jack = e_part + extra * 1.0
        m.group_params[1] = np.sqrt(jack * 16) * np.r_[np.ones(8), -np.ones(8)] / np.sqrt(16 / 15)
        dfs.append(m.noise(L).df)
    assert dfs[0] == pytest.approx(129.0)
    assert dfs[1] > 0.99 * dfs[0] and dfs[2] > 0.9 * dfs[0]


def test_a_committed_look_on_data_it_never_had_is_not_replayed():
    """results/seed-questions: the last timing pass re-timed all 170 runs after block 10, so
    looks 1-7 saw timing values the runs no longer hold. Re-read, they are marked "not
    replayed" and decide nothing; only the last look, whose data the runs are, decides."""
    from pathlib import Path

    from analysis.results import replay
    from analysis.sequential import plan_of
    from analysis.sweep_reader import read_parquet

    sweep = read_parquet(Path(__file__).parents[2] / "results" / "seed-questions" / "runs.parquet")
    plan = plan_of(replay(sweep, force=True).record.sequential)
    assert len(plan.looks) == 8
    for look in plan.looks[:7]:
        assert look.note.startswith("not replayed: its runs were timed again after it") and not look.decided
    assert plan.looks[7].note == ""


def test_a_relative_margin_is_resolved_at_the_first_look_and_kept():
    """`margin: 10%` is resolved on the first look's runs and recorded there; later looks,
    whose runs have another mean, use that number."""
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.report import build_report
    from analysis.sequential import Plan, plan_of

    df = two_factor(8, 0.0, seed=4, noise=0.2)
    df["cell"] = "D1=" + df["D1"].astype(str) + "|D2=" + df["D2"].astype(str)
    df["y"] += 0.5 * df["replicate"]  # the runs' mean grows with the blocks
    record = SweepRecord(experiment="rel", responses={"y": {"better": "higher", "margin": "10%"}},
                         sequential=Plan(8, 0.05).to_json())
    first = build_report(SweepFrame(df[df["replicate"] < 4], factors=["D1", "D2"], record=record), None)
    kept = first.decision.checks["y"].margin
    plan = plan_of(record.sequential)
    plan.looks = list(first.look.plan.looks)
    assert plan.looks[0].margins == {"y": pytest.approx(kept)}
    later = build_report(SweepFrame(df, factors=["D1", "D2"], record=SweepRecord(
        experiment="rel", responses={"y": {"better": "higher", "margin": "10%"}}, sequential=plan.to_json())), None)
    assert later.decision.checks["y"].margin == pytest.approx(kept)
    assert "resolved at the plan's first look" in later.decision.checks["y"].margin_text
    assert 0.1 * df["y"].mean() > 1.2 * kept  # resolved again on every run, it would have moved


def test_the_confirmations_of_one_screening_are_a_family_with_a_holm_view():
    from analysis.links import family_lines

    se, df = 0.1, 60
    sure = decide(Contrast("A", "", 0.6, se, df), "y", 0.05, 0.2, "higher", 1)  # p ~ 1e-7: matters
    edge = decide(Contrast("B", "", 0.21, se, df), "y", 0.05, 0.1, "higher", 1)  # p ~ 0.04: matters at 0.05
    open_ = decide(Contrast("C", "", 0.0, se, df), "y", 0.05, 0.05, "higher", 1)
    assert sure.matters and edge.matters and open_.verdict == UNDECIDED
    lines = family_lines([("c-a", sure, 0.05), ("c-b", edge, 0.05), ("c-c", open_, 0.05)])
    assert lines[0].startswith("the 3 confirmations are 3 families of one question each, at alpha 0.05, 0.05, 0.05")
    assert f"familywise error of up to {1 - 0.95 ** 3:.3g}" in lines[0]
    assert "c-a (matters, beyond the margin) holds; c-b (matters, size unsure) does not hold" in lines[1]
    assert lines[1].endswith("1 undecided, no claim")
    assert family_lines([("c-a", sure, 0.05)]) == []


def test_the_plan_prints_its_boundary_table():
    """`analysis plan` and the verbose report print the plan's boundary table (look, blocks,
    information, df, nominal levels), with the looks still planned."""
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.plan import plan_text
    from analysis.report import build_report
    from analysis.sequential import Plan

    df = two_factor(4, 0.0, seed=5, noise=0.2)
    df["cell"] = "D1=" + df["D1"].astype(str) + "|D2=" + df["D2"].astype(str)
    sweep = SweepFrame(df, factors=["D1", "D2"], record=SweepRecord(
        experiment="table", responses={"y": {"better": "higher", "margin": 0.01}}, sequential=Plan(6, 0.05).to_json()))
    text = plan_text(sweep, None)
    assert "boundaries of y (alpha* 0.025 a hypothesis" in text and "simulated calibration" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("1 ", "2 (planned)", "3 (planned)"))]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert rows[0][1:4] == ["4", "67%", "3"] and rows[1][2:5] == ["5", "83%", "4"] and rows[2][2:5] == ["6", "100%", "5"]
    first = float(rows[0][4])
    assert first == pytest.approx(float(f"{spent(0.67, 0.025):.3g}"))  # the first look spends its increment (t to the hundredth)
    assert "boundaries of y" in build_report(sweep, None).summary


def test_a_plan_that_can_never_decide_says_so_when_declared():
    """A plan of at most 3 blocks under own errors: no look ever tests a term (MIN_DF), and
    `trials validate` and `trials run` say so before anything runs."""
    from types import SimpleNamespace

    from analysis.sequential import MIN_DF
    from trials import spec_summary

    assert spec_summary.MIN_DF == MIN_DF
    spec = SimpleNamespace(replicates=2, sequential={"max_replicates": 3}, factors={"D1": ["a", "b"]})
    assert spec_summary.never_decides(spec)
    assert "the plan's maximum of 3 block(s) can never decide anything" in spec_summary.own_error_line(spec)
    for ok in ({"max_replicates": 4}, {"max_replicates": 3, "block_errors": "pooled"}, {}):
        assert not spec_summary.never_decides(SimpleNamespace(replicates=2, sequential=ok, factors={}))
