"""analysis.variance on simulated sweeps whose components are known.

Two generators. `sweep`: a mean response, per run a seed effect plus per prompt a common
prompt effect (cancels in contrasts) and a prompt x run interaction (the evaluation's
noise), so a contrast's true evaluation and seed variances are known in closed form.
`rounds_sweep`: decoding rounds as the evaluator records them (per prompt a few rounds of
K slots, per-slot confidences and the accepted length), each run with a seed-drawn quality
and calibration bias, scored by the trainer's own tau, ECE and AUROC
(`dspark.calibration`), with its delete-a-group jackknife records; there the true
components are measured by Monte Carlo (prompts redrawn under fixed seeds, and everything
redrawn)."""

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.variance import PROMPT_FACTORS, groups_of, kind_of, prompts_to_decide, split
from analysis.types import Contrast, UNDECIDED
from analysis.model import fit_response, term_contrasts
from analysis.power import p_decided
from analysis.verdicts import decide
from dspark import calibration
from dspark.metrics import jack_groups, jack_name

G = 16


def _frame(rows):
    df = pd.DataFrame(rows)
    for f in "AB":
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    df["cell"] = "A=" + df["A"].astype(str) + "|B=" + df["B"].astype(str)
    return df


def sweep(sigma_seed, sigma_int, prompts=32, replicates=6, effect=0.3, seed=0, name="spec/tau"):
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 0.5, prompts)  # every run decodes the same prompts: cancels in contrasts
    groups = jack_groups(prompts)
    rows = []
    for r in range(replicates):
        for a, b in itertools.product(("lo", "hi"), repeat=2):
            mu = 2.0 + (effect / 2 if a == "hi" else -effect / 2) + rng.normal(0, sigma_seed)
            y = mu + common + rng.normal(0, sigma_int, prompts)  # (P,)
            row = {"A": a, "B": b, "replicate": r, name: float(y.mean()), "split/prompts": float(prompts)}
            for g in range(groups):
                row[jack_name(name, g)] = float(np.delete(y, np.arange(g, prompts, groups)).mean())
            rows.append(row)
    return _frame(rows)


# ---------------------------------------------------------------- decoding rounds

K, ROUNDS, PROMPTS, REPS = 3, 4, 64, 4
RESPONSES = ("spec/tau", "conf/ece_mean", "conf/auroc_mean")


def _latents(rng):
    """Per run of a 2x2 x 4 blocks: (quality, calibration bias), drawn from the seeds."""
    out = {}
    for r in range(REPS):
        for a, b in itertools.product(("lo", "hi"), repeat=2):
            out[(a, b, r)] = (0.3 * (a == "hi") + rng.normal(0, 0.25), 0.4 * (a == "hi") + rng.normal(0, 0.3))
    return out


def _prompts(rng):
    """The shared prompts: a difficulty each, and per (run, prompt) interaction draws."""
    return rng.normal(0, 0.7, PROMPTS), rng


def _run(quality, bias, difficulty, rng):
    """One run's rounds on the shared prompts: (conf (N, K), survived (N, K), prompt per round)."""
    u = rng.normal(0, 0.6, PROMPTS)  # the prompt x run interaction
    logit = (quality + difficulty + u)[:, None, None] + np.array([1.5, 0.8, 0.2])[None, None, :]  # (P, 1, K)
    logit = np.broadcast_to(logit, (PROMPTS, ROUNDS, K))
    p = 1 / (1 + np.exp(-logit))
    accept = rng.random((PROMPTS, ROUNDS, K)) < p
    survived = np.cumprod(accept, axis=-1).astype(float)
    conf = 1 / (1 + np.exp(-(logit + bias + rng.normal(0, 0.5, logit.shape))))
    owner = np.repeat(np.arange(PROMPTS), ROUNDS)
    return conf.reshape(-1, K), survived.reshape(-1, K), owner


def _scores(conf, survived):
    valid = np.ones_like(survived, bool)
    m = calibration.prefix_metrics(conf, survived, valid, "conf/")
    return {"spec/tau": float((survived.sum(axis=1) + 1).mean()), "conf/ece_mean": m["conf/ece_mean"],
            "conf/auroc_mean": m["conf/auroc_mean"]}


def rounds_sweep(latents, difficulty, rng, jackknife=True):
    rows = []
    for (a, b, r), (quality, bias) in latents.items():
        conf, survived, owner = _run(quality, bias, difficulty, rng)
        row = {"A": a, "B": b, "replicate": r, "split/prompts": float(PROMPTS), **_scores(conf, survived)}
        if jackknife:
            for g in range(jack_groups(PROMPTS)):
                keep = owner % G != g
                row.update({jack_name(k, g): v for k, v in _scores(conf[keep], survived[keep]).items()})
        rows.append(row)
    return _frame(rows)


def _effect_a(df, response):
    fit = fit_response(df, response, ["A", "B"], "replicate", errors="pooled")
    return next(c.estimate for c in term_contrasts(fit, df, ["A", "B"]) if c.term == "A")


def truths(rng):
    """The A contrast's evaluation variance and the evaluation's share of its variance, by
    Monte Carlo: prompts redrawn under fixed seeds (the evaluation's part) against
    everything redrawn (the whole)."""
    within = {r: [] for r in RESPONSES}
    for _ in range(3):
        latents = _latents(rng)
        draws = {r: [] for r in RESPONSES}
        for _ in range(30):
            df = rounds_sweep(latents, _prompts(rng)[0], rng, jackknife=False)
            for r in RESPONSES:
                draws[r].append(_effect_a(df, r))
        for r in RESPONSES:
            within[r].append(np.var(draws[r], ddof=1))
    whole = {r: [] for r in RESPONSES}
    for _ in range(120):
        df = rounds_sweep(_latents(rng), _prompts(rng)[0], rng, jackknife=False)
        for r in RESPONSES:
            whole[r].append(_effect_a(df, r))
    return ({r: float(np.mean(within[r])) for r in RESPONSES},
            {r: float(np.mean(within[r]) / np.var(whole[r], ddof=1)) for r in RESPONSES})


def test_the_split_holds_for_a_mean_a_nonlinear_and_a_ranked_response():
    """tau (a mean), ECE (binned, nonlinear) and AUROC (ranks): the true share of the
    evaluation lies within the interval one sweep's jackknife states in most simulated
    sweeps. On average the contrast's evaluation variance is near the truth for tau and
    AUROC; for ECE it is high (the jackknife's variance is biased upward, Efron and Stein
    1981, most for a statistic built of absolute values over bins: about 1.5x here), so the
    split errs toward the evaluation and the planner toward more prompts, never the other
    way. (The share's own mean is not compared: a ratio over sigma^2 on 9 df is biased up
    by 9/7 whatever the jackknife does; its interval accounts for that.)"""
    rng = np.random.default_rng(0)
    var_truth, truth = truths(rng)
    assert all(0.2 < s < 0.9 for s in truth.values()), truth  # both parts matter in this design
    covered = {r: 0 for r in RESPONSES}
    var_eval = {r: [] for r in RESPONSES}
    sweeps = 12
    for _ in range(sweeps):
        df = rounds_sweep(_latents(rng), _prompts(rng)[0], rng)
        for r in RESPONSES:
            sp = split(df, r, ["A", "B"])
            assert sp is not None and sp.groups == G and sp.items == PROMPTS
            covered[r] += sp.share_low <= truth[r] <= sp.share_high
            var_eval[r].append(sp.var_eval["A"])
    ratio = {r: np.mean(var_eval[r]) / var_truth[r] for r in RESPONSES}
    for r in RESPONSES:
        assert covered[r] >= sweeps - 3, (r, covered[r], truth[r])  # 95% intervals
    assert 0.7 < ratio["spec/tau"] < 1.4 and 0.7 < ratio["conf/auroc_mean"] < 1.4, ratio
    assert 0.9 < ratio["conf/ece_mean"] < 2.6, ratio


@pytest.mark.parametrize("sigma_seed,sigma_int", [(0.05, 0.4), (0.1, 0.1)])
def test_the_split_recovers_known_components_of_a_mean_response(sigma_seed, sigma_int):
    evals, seeds = [], []
    for s in range(30):
        sp = split(sweep(sigma_seed, sigma_int, seed=s), "spec/tau", ["A", "B"])
        evals.append(sp.sigma_eval ** 2)
        seeds.append(sp.sigma_seed ** 2)
    true_eval = sigma_int ** 2 / 32  # a run's mean over 32 prompts
    assert np.mean(evals) == pytest.approx(true_eval, rel=0.25, abs=2e-4)
    assert np.mean(seeds) == pytest.approx(sigma_seed ** 2, rel=0.35, abs=2e-4)


def test_a_share_over_one_is_reported_not_capped():
    """Evaluation noise alone, and few runs: the estimate can pass 100%; it is printed as it
    is, and the text says the model does not fit."""
    for s in range(40):
        sp = split(sweep(0.0, 0.5, replicates=2, seed=s), "spec/tau", ["A", "B"])
        if sp.share > 1:
            assert sp.sigma_seed == 0 and "over 100%: the evaluation alone exceeds" in sp.text()
            assert f"{sp.share:.0%}" in sp.text()
            return
    pytest.fail("no simulated sweep gave a share over 100%")


def test_without_records_or_for_a_timed_response_there_is_no_split():
    df = sweep(0.05, 0.2).drop(columns=[jack_name("spec/tau", g) for g in range(G)])
    assert groups_of(df, "spec/tau") == 0 and split(df, "spec/tau", ["A", "B"]) is None
    timed = sweep(0.05, 0.2, name="spec/speedup")  # counted in the evaluation's prompts: not its own
    assert split(timed, "spec/speedup", ["A", "B"]) is None
    timed["timing/prompts"] = timed.pop("split/prompts")  # the timing pass's prompts: its own jackknife
    sp = split(timed, "spec/speedup", ["A", "B"])
    assert sp is not None and sp.kind == "timing_prompts" and "prompts of the timing pass" in sp.text()
    assert kind_of("val/bpb") == "eval_batches" and kind_of("conf/ece_mean") == "prompts"


def test_older_prompt_group_records_serve_a_mean_response_only():
    df = sweep(0.05, 0.3, replicates=3, seed=4)
    legacy = df.drop(columns=[jack_name("spec/tau", g) for g in range(G)])
    for g in range(4):  # a group's own value: what older evaluations recorded
        legacy[f"split/spec/tau@g{g}"] = df["spec/tau"] + np.random.default_rng(g).normal(0, 0.01, len(df))
    sp = split(legacy, "spec/tau", ["A", "B"])
    assert sp is not None and "prompt-group values" in sp.method
    other = legacy.rename(columns=lambda c: c.replace("spec/tau", "conf/ece_mean"))
    assert split(other, "conf/ece_mean", ["A", "B"]) is None


def test_more_prompts_decide_only_what_evaluation_noise_keeps_undecided():
    v = decide(Contrast("A", "", 0.02, 0.05, 20), "y", 0.01, 0.1, "higher", 3)
    assert v.verdict == UNDECIDED
    k = prompts_to_decide(v, var_eval=0.05 ** 2 * 0.9)  # nearly all of it is the evaluation's
    assert k is not None and k in PROMPT_FACTORS
    assert prompts_to_decide(v, var_eval=0.05 ** 2 * 0.01) is None  # the seeds' noise stays


def test_the_planner_prices_prompts_as_simulated_sweeps_decide():
    """Known components: a contrast's se at k times the prompts is sqrt(seed + eval / k)
    times the design's factor. The planner's multiple, from one sweep's jackknife, is the
    right one (the smallest that decides with 80% probability at the true se) or next to it
    in most sweeps; where the seeds dominate it says prompts will not do."""
    sigma_seed, sigma_int, prompts, reps, effect, margin = 0.01, 0.5, 32, 3, 0.0, 0.1
    factor = 4 / (4 * reps)  # a 2x2's effect: variance 4 sigma^2 / runs
    alpha_star = 0.05 / 2
    right = None
    for k in PROMPT_FACTORS:
        se = np.sqrt((sigma_seed ** 2 + sigma_int ** 2 / (k * prompts)) * factor)
        if p_decided(effect, se, 4 * reps - 1 - 3 - (reps - 1), alpha_star, margin) >= 0.8:
            right = k
            break
    assert right is not None and right > 1
    picked = []
    for s in range(20):
        df = sweep(sigma_seed, sigma_int, prompts=prompts, replicates=reps, effect=effect, seed=100 + s)
        sp = split(df, "spec/tau", ["A", "B"])
        fit = fit_response(df, "spec/tau", ["A", "B"], "replicate")
        c = next(c for c in term_contrasts(fit, df, ["A", "B"]) if c.term == "A")
        v = decide(Contrast("A", "", effect, c.se, c.df), "spec/tau", alpha_star, margin, "higher", 2)
        picked.append(prompts_to_decide(v, sp.var_eval["A"]))
    index = {k: i for i, k in enumerate(PROMPT_FACTORS)}
    steps = sorted(index[k] if k is not None else len(PROMPT_FACTORS) for k in picked)
    assert abs(steps[len(steps) // 2] - index[right]) <= 1, (right, picked)  # the median pick
    assert sum(abs(i - index[right]) <= 1 for i in steps) >= 13, (right, picked)  # each from 15 df of jackknife
    seeds_only = sweep(0.2, 0.01, prompts=prompts, replicates=reps, effect=0.0, seed=1)
    sp = split(seeds_only, "spec/tau", ["A", "B"])
    fit = fit_response(seeds_only, "spec/tau", ["A", "B"], "replicate")
    c = next(c for c in term_contrasts(fit, seeds_only, ["A", "B"]) if c.term == "A")
    v = decide(Contrast("A", "", 0.0, c.se, c.df), "spec/tau", alpha_star, margin, "higher", 2)
    assert v.verdict == UNDECIDED and prompts_to_decide(v, sp.var_eval["A"]) is None


def test_plan_prices_more_prompts_against_more_blocks():
    from analysis.frame import SweepFrame, SweepRecord
    from analysis.plan import plan_text
    from analysis.report import build_report

    df = sweep(0.005, 0.8, prompts=32, replicates=3, effect=0.0, seed=1)  # the evaluation's noise dominates
    df["run_s"] = 120.0
    df["split/decode_s_per_prompt"] = 0.5
    constructed = SweepFrame(df, factors=["A", "B"], record=SweepRecord(
        experiment="constructed", responses={"spec/tau": {"better": "higher", "margin": 0.1}}))
    text = plan_text(constructed, None)
    assert "spec/tau (primary): 2 undecided" in text and "the evaluation's share of its variance" in text
    assert "x the prompts (" in text and ") on the existing checkpoints" in text
    # B's estimate sits near a boundary: no multiple of the prompts decides it, and the plan says why
    assert "B: " in text and "lies so near the boundaries (0 and +-0.1)" in text
    assert "more evaluation items alone cannot decide every primary term" in text
    assert "blocks priced at 2 min per trial" in text and "every primary term decided by blocks alone" in text
    assert "items (prompts, held-out batches) are priced per term from its jackknife" in text
    rep = build_report(constructed, None)
    assert "    noise: spec/tau: residual sigma " in rep.summary


def test_each_group_is_fitted_as_its_own_response_would_be():
    """split fits the jackknife columns on the full fit's design; the estimates are those of
    fitting each column as the response."""
    df = sweep(0.05, 0.3, replicates=3, seed=4)
    sp = split(df, "spec/tau", ["A", "B"])
    by_group = {}
    for g in range(G):
        sub = df.assign(y=df[jack_name("spec/tau", g)])
        for c in term_contrasts(fit_response(sub, "y", ["A", "B"], "replicate", errors="pooled"), sub, ["A", "B"]):
            by_group.setdefault(c.term, []).append(c.estimate)
    assert sp.var_eval.keys() == by_group.keys()
    for term, values in by_group.items():
        v = np.asarray(values)
        assert sp.var_eval[term] == pytest.approx((G - 1) / G * ((v - v.mean()) ** 2).sum(), rel=1e-9)


def test_the_planner_decides_as_the_report_does_without_the_block_tests():
    """`analysis plan` skips the block-by-term tests (a refit per term: most of a plan's time
    at hundreds of blocks); every verdict, estimate and next step is the report's."""
    from analysis.verdicts import decide_all

    df = sweep(0.05, 0.3, replicates=4, seed=5)
    margins = {"spec/tau": {"margin": 0.1, "better": "higher"}}
    full = decide_all(df, ["spec/tau"], ["A", "B"], margins)
    lean = decide_all(df, ["spec/tau"], ["A", "B"], margins, block_tests=False)
    assert [(v.term, v.verdict, v.estimate, v.se, v.next_step) for v in full.verdicts] == \
        [(v.term, v.verdict, v.estimate, v.se, v.next_step) for v in lean.verdicts]
    assert any(v.block is not None for v in full.verdicts) and all(v.block is None for v in lean.verdicts)
