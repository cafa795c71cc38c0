import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.anova import AnalysisError
from analysis.attribution import analyse, dunnett_vs_control
from analysis.effects import factorial_effects, lenth
from analysis.sweep_reader import load_runs, read_parquet
from trials.export import to_parquet
from analysis.report import build_report
from tests.analysis.conftest import TRUE, synthetic_sweep

ROOT = Path(__file__).resolve().parents[2]


def test_synthetic_sweep_recovers_known_effects(store):
    synthetic_sweep(store, failed=0)
    sweep = load_runs("synthetic", store)
    df = sweep.runs
    assert sweep.factors == ["D1", "D2", "D9"]
    assert list(df["D1"].cat.categories) == ["shifted", "aligned"] and df["D1"].cat.ordered
    assert set(df["decay_gamma"]) == {"4.0", "block"} and df["block_size"].dtype.kind == "i"
    res = analyse(df, ["spec/tau"], ["D1", "D2", "D9"], block="replicate")["spec/tau"]
    eff = res.effects
    assert res.levels == {"D1": ("shifted", "aligned"), "D2": ("const4", "block"), "D9": ("hidden", "markov")}
    for term, true in TRUE.items():
        assert eff.loc[term, "ci_low"] <= true <= eff.loc[term, "ci_high"], term
        assert eff.loc[term, "p_adj"] < 0.01
    assert eff.loc["D2", "ci_low"] <= 0 <= eff.loc["D2", "ci_high"]
    assert eff.loc["D2", "p_adj"] > 0.05
    assert res.anova.loc["D1", "p"] < 1e-6 and res.anova.loc["D2", "p"] > 0.05


def test_failed_runs_are_listed_not_dropped(store):
    synthetic_sweep(store, failed=2)
    sweep = load_runs("synthetic", store)
    inc = sweep.incomplete_runs()
    assert len(sweep.runs) == 30 and len(inc) == 2 and set(inc["status"]) == {"FAILED"}
    rep = build_report(sweep, None, ["spec/tau"])
    assert "2 run(s) not analysed: 2 FAILED" in rep.summary
    assert "unbalanced design" in rep.summary and rep.results["spec/tau"].typ == 3


def test_parquet_round_trip(store, tmp_path):
    synthetic_sweep(store, failed=1)
    sweep = load_runs("synthetic", store)
    to_parquet(sweep, tmp_path / "runs.parquet")
    back = read_parquet(tmp_path / "runs.parquet")
    pd.testing.assert_frame_equal(back.runs, sweep.runs, check_categorical=True)
    assert back.factors == sweep.factors and len(back.incomplete_runs()) == 1
    assert back.runs["D9"].cat.ordered and list(back.runs["D9"].cat.categories) == ["hidden", "markov"]


def test_report_refusals(store):
    synthetic_sweep(store, failed=0)
    sweep = load_runs("synthetic", store)
    df = sweep.runs
    with pytest.raises(AnalysisError, match="response 'val/bpb' is constant"):
        build_report(sweep, None, ["val/bpb"])
    one_level = sweep.with_runs(df[df["D2"] == "block"].copy())
    with pytest.raises(AnalysisError, match="factor 'D2' has one level"):
        build_report(one_level, None, ["spec/tau"])
    empty = sweep.with_runs(df[~((df["D1"] == "aligned") & (df["D2"] == "block") & (df["D9"] == "markov"))].copy())
    with pytest.raises(AnalysisError, match="1 empty cell"):
        build_report(empty, None, ["spec/tau"])
    few = sweep.with_runs(df.groupby("cell").head(1).iloc[:5].copy())
    with pytest.raises(AnalysisError):
        build_report(few, None, ["spec/tau"])


def test_dunnett_against_the_control_arm(store):
    # (aux_weight would be no control here: the drafter stage ignores it, and validation
    # refuses a control that trains the same objective as a cell)
    synthetic_sweep(store, failed=0, controls={"dflash": {"head": "none", "confidence_input": "hidden"}})
    sweep = load_runs("synthetic", store)
    df = sweep.runs
    d = dunnett_vs_control(df, "spec/tau", "control=dflash")
    assert len(d) == 8 and (d["diff"] > 0.3).all() and (d["p"] < 0.01).all()
    rep = build_report(sweep, None, ["spec/tau"])
    assert "spec/tau" in rep.dunnett
    # every factorial arm pooled against the control: 3.0 - 1.5 in the synthetic model
    c = rep.control["spec/tau"]
    assert c["ci_low"] < 1.5 + 0.02 < c["ci_high"] and c["n_factorial"] == 32 and c["n_control"] == 4
    assert c["rel"] == pytest.approx(c["diff"] / c["control_mean"])
    # the pooled contrast is a term of the verdicts, with the same estimate
    v = next(v for v in rep.decision.of("spec/tau") if v.term == "vs control=dflash")
    assert v.estimate == pytest.approx(c["diff"]) and v.verdict == "matters, size unsure"  # no margin declared
    # a primary term by default; one run per block, as every cell: judged paired over the blocks
    assert v.in_family and v.errors == "block x term (paired over blocks)" and v.df == pytest.approx(3)
    per_block = [g[g["cell"] != "control=dflash"]["spec/tau"].mean() - g[g["cell"] == "control=dflash"]["spec/tau"].mean()
                 for _, g in df.groupby("replicate")]
    assert v.se == pytest.approx(np.std(per_block, ddof=1) / np.sqrt(4), rel=1e-9)
    # a control arm of another size: HC2 with Bell-McCaffrey df
    from analysis.model import control_contrast

    more = pd.concat([df, df[df["cell"] == "control=dflash"]], ignore_index=True)
    c2 = control_contrast(more, "spec/tau", "control=dflash", "replicate")
    assert c2.errors == "HC2" and c2.df != v.df
    assert re.search(r"\n    vs control=dflash: matters, size unsure \(every factorial arm against the control: "
                     r"\+1\.[45]\d*", rep.summary), rep.summary


def test_report_gives_every_term_a_verdict_that_agrees_with_its_interval(store):
    synthetic_sweep(store, failed=0)
    rep = build_report(load_runs("synthetic", store), None, ["spec/tau"], margins={"spec/tau": 0.2})
    d = rep.decision
    assert d.family == 3 and d.alpha_star == pytest.approx(0.05 / 3)  # the main effects
    verdict = {v.term: v.verdict for v in d.of("spec/tau")}
    # TRUE: D1 1.0, D9 0.3, D1:D9 -0.2 (at the margin: undecided is the honest answer), the rest 0
    assert verdict["D1"] == "matters, beyond the margin" and verdict["D9"].startswith("matters")
    assert verdict["D2"] == "negligible" and verdict["D1:D2:D9"] == "negligible"
    lines = [ln.strip() for ln in rep.summary.splitlines() if ln.startswith("    ") and ":" in ln]
    for v in d.of("spec/tau"):
        line = next(ln for ln in lines if ln.startswith(f"{v.term}: "))
        assert line.startswith(f"{v.term}: {v.verdict}")
        lo, hi, _ = v.interval()
        assert f"[{lo:+.4g}, {hi:+.4g}]" in line
        if v.verdict == "negligible":
            assert -0.2 < lo and hi < 0.2
        elif v.verdict == "matters, beyond the margin":
            assert lo > 0.2 or hi < -0.2
        else:
            assert (v.ci_low > 0 or v.ci_high < 0) == v.verdict.startswith("matters")
    assert "not detected" not in rep.summary
    assert "primary: spec/tau (higher is better; margin +-0.2; sigma" in rep.summary


def test_report_drift_check_sees_a_trend_over_the_run_order(store):
    import mlflow

    synthetic_sweep(store, failed=0)
    client = mlflow.tracking.MlflowClient(store)
    exp = client.get_experiment_by_name("synthetic")
    for r in client.search_runs([exp.experiment_id], "tags.trial_key != ''"):
        order = int(r.data.tags["run_order"])
        client.log_metric(r.info.run_id, "tf/tau", r.data.metrics["spec/tau"] + 0.05 * order, step=20)
    sweep = load_runs("synthetic", store)
    assert sorted(sweep.runs["run_order"]) == list(range(32))
    rep = build_report(sweep, None, ["spec/tau", "tf/tau"])
    slope, p = rep.drift["tf/tau"]
    assert slope > 0 and p < 0.01  # blocks and cell means absorb part of the trend, not all
    assert rep.drift["spec/tau"][1] > 0.01
    assert "<- drift" in rep.summary.split("tf/tau (higher is better")[1]


def test_holm_adjustment_is_not_smaller_than_raw(store):
    synthetic_sweep(store, failed=0)
    df = load_runs("synthetic", store).runs
    res = analyse(df, ["spec/tau", "tf/tau"], ["D1", "D2", "D9"], adjust="holm")
    for r in res.values():
        a = r.anova.drop(index="Residual")
        assert (a["p_adj"] >= a["p"] - 1e-15).all()


def test_report_cli_writes_html_and_summary(store, tmp_path, capsys):
    synthetic_sweep(store, failed=0)
    from analysis.cli import main

    # the recap (`make demo`'s last screen): each sweep's question, its table and sentences, and
    # nothing written or logged
    assert main(["recap", "synthetic", "--tracking-uri", store]) == 0
    recap = capsys.readouterr().out
    assert recap.startswith("=== synthetic: (no description) ===\nverdicts (estimate [interval the decision used]):")
    assert "\n  spec/tau: D1 (shifted -> aligned) improves it" in recap and "every detail: analysis report synthetic" in recap
    assert not (tmp_path / "reports").exists()
    # the last screen ends with the next command (every term decided here: each one's detail)
    assert recap.rstrip().splitlines()[-1] == "  analysis report synthetic --verbose  (every family term is decided: each one's detail)" or \
        recap.rstrip().splitlines()[-1].startswith(("  trials augment synthetic --replicates ", "  analysis plan synthetic")), recap
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "synthetic", "--tracking-uri", store,
                        "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True, cwd=tmp_path)  # artifacts go to ./mlruns
    assert r.returncode == 0, r.stderr
    # the answer in one screen: each term's verdict with the interval it used, a sentence per response
    assert re.search(r"  spec/tau \(higher is better; no margin declared\)\n    D1 +matters, size unsure +\+0\.9\d* "
                     r"\[\+0\.9\d*, \+1\.0\d*\]\n", r.stdout), r.stdout
    assert "  spec/tau: D1 (shifted -> aligned) improves it (no margin declared to size it)" in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= 120 and len(r.stdout.splitlines()) <= 40, r.stdout
    assert "no sequential plan" in r.stdout and "at 99.167%" not in r.stdout  # the detail is --verbose's
    assert main(["report", "synthetic", "--tracking-uri", store, "--out", str(tmp_path / "rep"), "--no-log",
                 "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert re.search(r"spec/tau \(higher is better.*\n    D1: matters, size unsure \(shifted -> aligned: \+0\.9\d+ "
                     r"\[\+0\.9\d*, \+1\.0\d*\] at 99\.167%; no margin declared, better\)", verbose), verbose
    assert "fixed-sample analysis (no sequential plan declared) of 4 block(s) at alpha 0.05" in verbose
    assert "experiment synthetic: its spec gives no description (parallel stage: drafter)" in r.stdout
    html = (tmp_path / "rep" / "synthetic" / "report.html").read_text()
    assert "<h3>ANOVA (Type 2; F tests, p unadjusted; the verdicts above decide)</h3>" in html
    # the verdict table comes right after the question
    assert re.search(r"</h1><p>experiment synthetic: its spec gives no description \(parallel stage: drafter\)</p><p class='look'>fixed-sample analysis "
                     r"[^<]*</p><table class='t verdicts'>", html)
    # one self-contained file: every image embedded, none beside it
    for alt in ("r0_main", "r0_interactions", "r0_pareto", "r0_halfnormal", "r0_drift", "acceptance_curves"):
        assert f'alt="{alt}"' in html
    assert html.count('src="data:image/png;base64,') >= 6 and not (tmp_path / "rep" / "synthetic" / "img").exists()
    md = (tmp_path / "rep" / "synthetic" / "report.md").read_text()
    assert "| D1 |" in md and "## Verdicts" in md and md.count("\n# ") == 0 and md.startswith("# Attribution")
    for text in (md, html):  # the coded design and its alias structure (here: none)
        assert "full factorial: no effect is aliased" in text
    # run names link to their runs; the attribution is logged on the parent run
    sweep = load_runs("synthetic", store)
    assert f"#/experiments/{sweep.record.experiment_id}/runs/{sweep.runs['run_id'].iloc[0]}" in html
    import mlflow

    client = mlflow.tracking.MlflowClient(store)
    parent = client.get_run(sweep.record.parent_run_id)
    # the answer is the run's description, a sentence per response first; no tag per verdict, none empty
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith("**The answer**, a sentence per primary response:\n\n- spec/tau: D1 (shifted -&gt; "
                           "aligned) improves it"), note[:300]
    assert "| spec/tau (no margin) | D1 | matters, size unsure |" in note
    assert f"runs/{parent.info.run_id}/artifactPath/attribution/report.html?workflowType=machine_learning" in note
    assert not [k for k in parent.data.tags if k.startswith("verdict.")]
    assert all(v.strip() not in ("", "[]", "{}") for v in parent.data.tags.values()), parent.data.tags
    assert not [k for k in parent.data.metrics if k.startswith("attribution/")]  # no metric flood
    assert set(parent.data.metrics) == {"verdicts/matters_beyond", "verdicts/matters_unsure", "verdicts/negligible",
                                        "verdicts/undecided"}
    # the look is recorded: a second report on the same data is the same look
    plan = json.loads(parent.data.tags["sequential"])
    assert not plan["declared"] and len(plan["looks"]) == 1 and plan["looks"][0]["blocks"] == 4
    arts = {a.path for a in client.list_artifacts(parent.info.run_id, "attribution")}
    assert arts == {"attribution/report.html", "attribution/report.md", "attribution/verdicts.csv"}
    table = pd.read_csv(client.download_artifacts(parent.info.run_id, "attribution/verdicts.csv", str(tmp_path)))
    assert len(table) == 14 and set(table["verdict"]) <= {"matters, beyond the margin", "matters, size unsure",
                                                          "negligible", "undecided"}  # spec/tau and tf/tau
    assert json.loads(parent.data.tags["attribution.alpha"])["family"] == 6  # what the verdicts rest on
    again = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "synthetic", "--tracking-uri", store,
                            "--out", str(tmp_path / "rep"), "--no-log"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert again.returncode == 0 and "fixed-sample analysis (no sequential plan declared)" in again.stdout
    plan = json.loads(client.get_run(sweep.record.parent_run_id).data.tags["sequential"])
    assert len(plan["looks"]) == 1
    # the same look reported again adds no point to the verdict counts (a point a look, at its index)
    assert main(["report", "synthetic", "--tracking-uri", store, "--out", str(tmp_path / "rep")]) == 0
    capsys.readouterr()
    assert [m.step for m in client.get_metric_history(sweep.record.parent_run_id, "verdicts/undecided")] == [1]
    # a what-if (a margin of one's own) goes to its own folder and leaves the logged results as they were
    before = client.get_run(sweep.record.parent_run_id).data
    html_before = (tmp_path / "rep" / "synthetic" / "report.html").read_text()
    what = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "synthetic", "--tracking-uri", store,
                           "--out", str(tmp_path / "rep"), "--margin", "spec/tau=0.05"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert what.returncode == 0 and "what-if (margins, responses, alpha or adjustment given): nothing logged" in \
        what.stdout
    after = client.get_run(sweep.record.parent_run_id).data
    assert after.tags == before.tags and after.metrics == before.metrics
    assert (tmp_path / "rep" / "synthetic" / "report.html").read_text() == html_before
    assert "margin ±0.05" in (tmp_path / "rep" / "synthetic" / "what-if" / "report.html").read_text()
    bad = subprocess.run([sys.executable, "-m", "analysis.cli", "report", "synthetic", "--tracking-uri", store,
                          "--out", str(tmp_path / "rep"), "--responses", "val/bpb"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "analysis: cannot analyse: response 'val/bpb' is constant" in bad.stderr


def test_lenth_flags_the_large_effects():
    rng = np.random.default_rng(3)
    rows = []
    for i in range(16):
        lv = {f: ("lo", "hi")[(i >> k) & 1] for k, f in enumerate("ABCD")}
        y = 5 * (lv["A"] == "hi") + rng.normal(0, 0.2)
        rows.append({**lv, "y": y})
    df = pd.DataFrame(rows)
    eff = factorial_effects(df, "y", list("ABCD"), levels={f: ("lo", "hi") for f in "ABCD"})
    L = lenth(eff)
    assert L["active"]["A"] and sum(L["active"].values()) <= 2


def test_backbone_stage_ranks_val_bpb_and_step_cost_and_names_degenerate_responses(store):
    synthetic_sweep(store, failed=0)
    sweep = load_runs("synthetic", store)
    df = sweep.runs
    df["parallel_stage"] = "backbone"  # the seed's system
    rng = np.random.default_rng(3)
    df["val/bpb"] = 2.5 + rng.normal(0, 0.01, len(df))
    df["train/step_ms"] = 50 + rng.normal(0, 1, len(df))
    rep = build_report(sweep, None)
    assert list(rep.results) == ["val/bpb", "train/step_ms"]
    assert "(parallel stage: backbone)" in rep.summary.splitlines()[0]
    assert any(s.startswith("tf/tau (not ranked: degenerate in the backbone stage") for s in rep.skipped)
    rep = build_report(sweep, None, ["tf/tau", "val/bpb"])  # asked for: still not ranked, and said so
    assert list(rep.results) == ["val/bpb"] and "tf/tau (not ranked" in rep.summary
    with pytest.raises(AnalysisError, match="degenerate"):
        build_report(sweep, None, ["tf/tau"])


def test_plan_cli_prints_the_replicates_needed(store, capsys):
    from analysis.cli import main
    from analysis.power import replicates_needed

    synthetic_sweep(store, failed=0)
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "plan", "synthetic", "--tracking-uri", store,
                        "--effect", "0.05", "--response", "spec/tau"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    sigma = build_report(load_runs("synthetic", store), None, ["spec/tau"]).decision.checks["spec/tau"].sigma
    need = replicates_needed(0.05, sigma, 8)
    assert f"spec/tau: sigma {sigma:.4g} over 8 cells" in r.stdout and f"needed: {need} replicates" in r.stdout
    # the refusals, in process (the command's own exit path, run_command, is the same)
    for args, word in ((["--effect", "0"], "--effect"), (["--effect=-1e999"], "--effect"),
                       (["--effect", "0.1", "--power", "1.5"], "--power"),
                       (["--margin", "spec/tau=-1"], "--margin"), (["--margin", "spec/tau"], "--margin")):
        assert main(["plan", "synthetic", "--tracking-uri", store, *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("analysis: ") and word in err, (args, err)
    # without --effect: what would decide each undecided term
    assert main(["plan", "synthetic", "--tracking-uri", store, "--margin", "spec/tau=0.01"]) == 0
    out = capsys.readouterr().out
    assert "spec/tau (primary):" in out and "more replicate block(s)" in out
    # every price names the command that buys it, with the number it prices
    import re

    flat = " ".join(out.split())
    priced = re.findall(r"(\d+) more block\(s\) \(\d+ trials: trials augment synthetic --replicates (\d+)\)", flat)
    assert priced and all(a == b for a, b in priced), flat
    every = re.search(r"(\d+) more replicate block\(s\) = \d+ trials[^:]*: trials augment synthetic --replicates (\d+)",
                      flat)
    assert every and every[1] == every[2], flat


def test_alias_structure_read_off_the_runs_matches_the_spec():
    """The report derives the alias structure from the cells that ran; it must agree with
    the one `trials validate` derives from the generators (2^(4-1), D = A*B*C)."""
    import pandas as pd

    from analysis.coded_design import alias_structure
    from trials.fraction import alias_structure as spec_aliases
    from trials.validate import parse

    spec = parse({"name": "frac", "base": {"preset": "tiny"},
                  "factors": {"A": {"lo": {"lr": 1e-3}, "hi": {"lr": 2e-3}},
                              "B": {"lo": {"batch_size": 4}, "hi": {"batch_size": 8}},
                              "C": {"lo": {"stride": 8}, "hi": {"stride": 16}},
                              "D": {"lo": {"markov_rank": 8}, "hi": {"markov_rank": 16}}},
                  "design": {"generators": {"D": "A*B*C"}}})
    coded = pd.DataFrame([{f: -1 if t.levels[f] == "lo" else 1 for f in "ABCD"} for t in spec.trials])

    def parse_lines(lines):
        return {left.strip(): set(right.split(" = ")) for left, right in (ln.split(" = ", 1) for ln in lines)}

    ours, theirs = parse_lines(alias_structure(coded)), parse_lines(spec_aliases(spec))
    assert ours == theirs
    assert ours["A"] == {"B:C:D"} and ours["A:B"] == {"C:D"} and ours["I"] == {"A:B:C:D"}
    # two generators, one of them negative in its cells' coding (E's first level is "hi"): the
    # defining relation's words and signs, and every line, still the same from both
    knobs = {"A": ("lr", 1e-3, 2e-3), "B": ("batch_size", 4, 8), "C": ("stride", 8, 16),
             "D": ("markov_rank", 8, 16), "E": ("aux_weight", 0.2, 0.1)}
    factors = {f: {("hi" if f == "E" else "lo"): {k: a}, ("lo" if f == "E" else "hi"): {k: b}}
               for f, (k, a, b) in knobs.items()}
    spec = parse({"name": "frac2", "base": {"preset": "tiny"}, "design": {"generators": {"D": "A*B", "E": "A*C"}},
                  "factors": factors})
    coded = pd.DataFrame([{f: -1 if t.levels[f] == list(spec.factors[f])[0] else 1 for f in "ABCDE"}
                          for t in spec.trials])
    assert alias_structure(coded) == spec_aliases(spec)
    assert parse_lines(spec_aliases(spec))["I"] == {"A:B:D", "A:C:E", "B:C:D:E"}


def test_margins_travel_from_the_spec_to_the_parent_to_parquet(store, tmp_path):
    import mlflow

    from tests.analysis.conftest import FACTORS
    from trials.validate import parse
    from trials.tracking import open_ledger

    spec = parse({"name": "margins", "base": {"preset": "tiny"}, "factors": FACTORS, "replicates": 2,
                  "responses": {"spec/tau": {"margin": 0.25}}})
    ledger = open_ledger(store, spec)
    rng = np.random.default_rng(0)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {"target_hash": "0" * 16})
        y = 3.0 + (0.5 if t.levels["D1"] == "aligned" else -0.5) + rng.normal(0, 0.02)
        ledger.log_metrics(run_id, {"spec/tau": y, "tf/tau": y}, step=1)
        ledger.finish(run_id, "FINISHED")
    ledger.finish(ledger.parent_id, "FINISHED")
    parent = mlflow.tracking.MlflowClient(store).get_run(ledger.parent_id)
    assert json.loads(parent.data.tags["responses"]) == {"spec/tau": {"better": "higher", "margin": 0.25}}
    sweep = load_runs("margins", store)
    assert sweep.record.responses == {"spec/tau": {"better": "higher", "margin": 0.25}}
    to_parquet(sweep, tmp_path / "runs.parquet")
    back = read_parquet(tmp_path / "runs.parquet")
    rep = build_report(back, None)  # the spec's margin, from the parquet alone
    assert list(rep.decision.checks) == ["spec/tau", "tf/tau"] and rep.decision.family == 3
    assert rep.decision.checks["spec/tau"].margin == 0.25 and rep.decision.checks["tf/tau"].margin is None
    assert "primary: spec/tau (higher is better; margin +-0.25;" in rep.summary
    assert "secondary: tf/tau" in rep.summary
    over = build_report(back, None, margins={"spec/tau": 0.05, "tf/tau": 0.1})  # --margin overrides and adds
    assert over.decision.checks["spec/tau"].margin == 0.05 and over.decision.family == 6
    assert over.look.what_if and over.look.label().startswith("what-if")


def test_the_model_fit_is_stated_per_response_as_statsmodels_fits_it():
    import statsmodels.formula.api as smf

    from analysis.anova import anova_with_fit
    from analysis.diagnostics import model_fit_table

    rng = np.random.default_rng(3)
    rows = [{"A": a, "B": b, "replicate": r, "y": 1.0 + 0.5 * (a == "a2") + rng.normal(0, 0.2)}
            for a in ("a1", "a2") for b in ("b1", "b2") for r in range(3)]
    df = pd.DataFrame(rows)
    table, fit = anova_with_fit(df, "y", ["A", "B"])
    ref = smf.ols("y ~ C(A, Sum) * C(B, Sum)", data=df).fit()
    assert fit.n == 12 and fit.df_resid == ref.df_resid == 8
    assert fit.s == pytest.approx(np.sqrt(ref.mse_resid)) and fit.r2 == pytest.approx(ref.rsquared)
    assert fit.r2_adj == pytest.approx(ref.rsquared_adj)
    assert np.allclose(fit.resid + fit.fitted, df["y"])
    from analysis.report_types import ResponseResult

    t = model_fit_table({"y": ResponseResult("y", table, None, 2, True, fit=fit)})
    assert list(t.columns) == ["n", "df_resid", "S", "R2", "R2_adj"] and t.loc["y", "R2"] == pytest.approx(ref.rsquared)



def test_the_pareto_line_names_the_level_it_is_drawn_at():
    """At a late look's level (0.0007 two-sided) the legend read "t crit (100%)"."""
    from analysis.rendering.plots import critical_label

    assert critical_label(0.000693) == "t crit (two-sided alpha 0.000693)"
    assert critical_label(0.05) == "t crit (two-sided alpha 0.05)"
