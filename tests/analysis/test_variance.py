"""analysis.variance on simulated sweeps whose components are known.

Two generators. `sweep`: a mean response, per run a seed effect plus per prompt a common
prompt effect (cancels in contrasts), a prompt x run interaction (the evaluation's noise),
and, where asked, an items x term interaction (a prompt that favours A's high level in every
block) and a block x term one (a block that favours it), so a contrast's true variance by
source is known in closed form:

    Var(A) = (sigma_seed^2 + sigma_int^2 / P) / B + sigma_it^2 / P + sigma_bt^2 / B
`rounds_sweep`: decoding rounds as the evaluator records them (per prompt a few rounds of
K slots, per-slot confidences and the accepted length), each run with a seed-drawn quality
and calibration bias, scored by the trainer's own tau, ECE and AUROC
(`dspark.calibration`), with its delete-a-group jackknife records; there the true
components are measured by Monte Carlo (prompts redrawn under fixed seeds, and everything
redrawn)."""

import itertools

import re

import numpy as np
import pandas as pd
import pytest

from scipy import stats

from analysis import variance
from analysis.model import fit_response, term_contrasts
from analysis.power import p_decided
from analysis.result_types import UNDECIDED, Contrast, TermNoise
from analysis.item_kinds import kind_of
from analysis.variance import PROMPT_FACTORS, groups_of, prompts_to_decide
from analysis.verdicts import decide, decide_all, response_models
from dspark import calibration
from dspark.metrics import jack_groups
from trials.store.items import jack_name
from trials.workload import load_workload

G = 16


def _frame(rows):
    df = pd.DataFrame(rows)
    for f in "AB":
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    df["cell"] = "A=" + df["A"].astype(str) + "|B=" + df["B"].astype(str)
    return df


def sweep(sigma_seed, sigma_int, prompts=32, replicates=6, effect=0.3, seed=0, groups=None, **interactions):
    """`interactions`: sigma_it (items x term) and sigma_bt (block x term), 0 unless given."""
    sigma_it, sigma_bt = interactions.pop("sigma_it", 0.0), interactions.pop("sigma_bt", 0.0)
    assert not interactions, interactions
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 0.5, prompts)  # every run decodes the same prompts: cancels in contrasts
    item_term = rng.normal(0, sigma_it, prompts)  # (P,): a prompt favours A=hi in every block
    block_term = rng.normal(0, sigma_bt, replicates)  # (B,): a block favours A=hi in every prompt
    groups = groups or jack_groups(prompts)  # the trainer's, unless a workload chose its own
    rows = []
    for r in range(replicates):
        for a, b in itertools.product(("lo", "hi"), repeat=2):
            sign = 1.0 if a == "hi" else -1.0
            mu = 2.0 + sign * (effect + block_term[r]) / 2 + rng.normal(0, sigma_seed)
            y = mu + common + sign * item_term / 2 + rng.normal(0, sigma_int, prompts)  # (P,)
            row = {"A": a, "B": b, "replicate": r, "spec/tau": float(y.mean()), "split/prompts": float(prompts)}
            for g in range(groups):
                row[jack_name("spec/tau", g)] = float(np.delete(y, np.arange(g, prompts, groups)).mean())
            rows.append(row)
    return _frame(rows)


def as_response(df, name):
    """A `sweep` whose response (and its jackknife columns) is called `name`."""
    return df.rename(columns={c: c.replace("spec/tau", name, 1) for c in df.columns if "spec/tau" in c})


# ---------------------------------------------------------------- decoding rounds

K, ROUNDS, PROMPTS, REPS = 3, 4, 64, 4
RESPONSES = ("spec/tau", "conf/ece_mean", "conf/auroc_mean")
RULES = load_workload("dspark").registry  # the rows that say which count each response's items are in


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
    return ({r: float(np.mean(within[r])) for r in RESPONSES}, {r: float(np.var(whole[r], ddof=1)) for r in RESPONSES})


def test_the_model_holds_for_a_mean_a_nonlinear_and_a_ranked_response():
    """tau (a mean), ECE (binned, nonlinear) and AUROC (ranks), where quality shifts every
    prompt's acceptance nonlinearly, so items x term arises by itself: A's evaluation parts
    (items x runs + items x term) match the Monte Carlo variance with prompts redrawn under
    fixed seeds, and its total the variance with everything redrawn, on average over
    simulated sweeps. For ECE the jackknife's variance is biased upward (Efron and Stein
    1981, most for a statistic built of absolute values over bins), so the model errs toward
    the evaluation and the planner toward more prompts, never the other way."""
    rng = np.random.default_rng(0)
    within, whole = truths(rng)
    evaluation = {r: [] for r in RESPONSES}
    total = {r: [] for r in RESPONSES}
    for _ in range(12):
        df = rounds_sweep(_latents(rng), _prompts(rng)[0], rng)
        for r in RESPONSES:
            _, n, sp = a_noise(df, r, tests=False)
            assert sp is not None and sp.groups == G and sp.items == PROMPTS and 0 <= sp.share <= 1
            evaluation[r].append(n.item_run + n.item_term)
            total[r].append(n.total)
    ev = {r: np.mean(evaluation[r]) / within[r] for r in RESPONSES}
    tot = {r: np.mean(total[r]) / whole[r] for r in RESPONSES}
    assert 0.6 < ev["spec/tau"] < 1.5 and 0.6 < ev["conf/auroc_mean"] < 1.5, ev
    assert 0.8 < ev["conf/ece_mean"] < 2.8, ev
    assert all(0.6 < t < 1.8 for t in tot.values()), tot


def a_noise(df, response="spec/tau", tests=True):
    """A's contrast, its variance by source, and the response's split."""
    ms = response_models(df, [response], ["A", "B"], RULES)
    m = ms.models[response]
    if tests:
        variance.add_tests(m, [("A",)])
    c = next(c for c in term_contrasts(ms.fits[response], ms.rows[response], ["A", "B"]) if c.term == "A")
    return c, m.noise(c.L), ms.split(response)


def true_var(sigma_seed, sigma_int, sigma_it, sigma_bt, prompts=32, replicates=6):
    return (sigma_seed ** 2 + sigma_int ** 2 / prompts) / replicates + sigma_it ** 2 / prompts + \
        sigma_bt ** 2 / replicates


@pytest.mark.parametrize("sigma_seed,sigma_int,sigma_it", [(0.05, 0.4, 0.0), (0.1, 0.1, 0.0), (0.03, 0.2, 0.3)])
def test_each_source_is_recovered_on_average(sigma_seed, sigma_int, sigma_it):
    """Over simulated sweeps, each part of A's variance (seeds, items x runs, items x term)
    and the split of the residual come out near their known values."""
    parts, splits = [], []
    for s in range(30):
        _, n, sp = a_noise(sweep(sigma_seed, sigma_int, seed=s, sigma_it=sigma_it), tests=False)
        parts.append((n.seeds, n.item_run, n.item_term))
        splits.append((sp.sigma_eval ** 2, sp.sigma_seed ** 2))
    seeds, item_run, item_term = np.mean(parts, axis=0)
    assert seeds == pytest.approx(sigma_seed ** 2 / 6, rel=0.35, abs=2e-5)
    assert item_run == pytest.approx(sigma_int ** 2 / 32 / 6, rel=0.3, abs=2e-5)
    if sigma_it:
        assert item_term == pytest.approx(sigma_it ** 2 / 32, rel=0.3)
    else:  # truncated at zero, so biased up where the truth is 0: by about 15% of the items x runs part
        assert item_term < 0.25 * item_run
    evals, seeds_ = np.mean(splits, axis=0)
    assert evals == pytest.approx(sigma_int ** 2 / 32, rel=0.25, abs=2e-4)
    assert seeds_ == pytest.approx(sigma_seed ** 2, rel=0.35, abs=2e-4)


def test_shares_lie_between_zero_and_one_by_construction():
    """Evaluation noise alone, few runs, and an items x term interaction: the old split put
    the evaluation at 112-291% of the residual; each part is a variance >= 0 now, the
    response's share is capped at 1 with its interval, and the text never says over 100%."""
    for s in range(40):
        _, n, sp = a_noise(sweep(0.0, 0.5, replicates=2, seed=s, sigma_it=0.4), tests=False)
        assert 0 <= sp.share_low <= sp.share <= sp.share_high <= 1
        assert min(n.seeds, n.item_run, n.item_term) >= 0 and sum(n.shares().values()) == pytest.approx(1)
        assert "over 100%" not in sp.text()


def _coverage(n_sims, **kw):
    """How often A's 95% interval (its model's se and Satterthwaite df) holds the true effect."""
    hits = 0
    for s in range(n_sims):
        c, n, _ = a_noise(sweep(seed=1000 + s, effect=0.3, **kw))
        hits += abs(c.estimate - 0.3) <= stats.t.ppf(0.975, n.df) * n.se
    return hits / n_sims


@pytest.mark.parametrize("kw", [
    dict(sigma_seed=0.03, sigma_int=0.2, sigma_it=0.15, sigma_bt=0.2),  # both interactions real
    dict(sigma_seed=0.05, sigma_int=0.3, sigma_it=0.0, sigma_bt=0.0),  # neither: the pooled residual holds
], ids=["block-and-item-by-term", "no-interaction"])
def test_intervals_cover_at_their_level_with_block_and_item_by_term_noise(kw):
    """400 simulated sweeps (2 x 2, 6 blocks, 32 prompts in 16 groups): the 95% interval's
    coverage is within three Monte Carlo errors of nominal (or above it). The pooled residual
    alone covers far less where the interactions are real (checked on the same sweeps)."""
    n_sims = 400
    cover = _coverage(n_sims, **kw)
    mc = 3 * np.sqrt(0.95 * 0.05 / n_sims)
    assert cover >= 0.95 - mc, cover
    if kw["sigma_bt"]:
        assert cover <= 0.95 + mc, cover
        pooled = 0
        for s in range(100):
            df = sweep(seed=1000 + s, effect=0.3, **kw)
            fit = fit_response(df, "spec/tau", ["A", "B"], "replicate")
            c = next(c for c in term_contrasts(fit, df, ["A", "B"]) if c.term == "A")
            pooled += abs(c.estimate - 0.3) <= stats.t.ppf(0.975, c.df) * c.se
        assert pooled / 100 < 0.8, pooled


def test_a_term_with_block_by_term_variation_is_judged_against_it():
    """A seed that favours one arm: A's block-by-term test rejects, and its error is its own
    block-by-term mean square on (B - 1) df, not the pooled residual; B's stays pooled."""
    df = sweep(0.02, 0.1, sigma_bt=0.3, seed=3)
    margins = {"spec/tau": {"margin": 0.1, "better": "higher"}}
    d = decide_all(df, ["spec/tau"], ["A", "B"], margins)
    v = {x.term: x for x in d.of("spec/tau")}
    assert v["A"].block.used and v["A"].noise.source == "block x term" and v["A"].errors == "block x term"
    per_block = [g[g.A == "hi"]["spec/tau"].mean() - g[g.A == "lo"]["spec/tau"].mean()
                 for _, g in df.groupby("replicate")]
    assert v["A"].se == pytest.approx(np.std(per_block, ddof=1) / np.sqrt(6), rel=0.02)  # the paired t on blocks
    assert v["A"].df == pytest.approx(5, abs=0.3) and "judged against it (5 df)" in v["A"].block.text()
    # no preliminary test: B, whose test does not reject, is judged against its own error too
    assert v["B"].block.p > 0.05 and v["B"].block.used and v["B"].noise.source == "block x term"
    assert v["B"].df == pytest.approx(5, abs=0.3)
    lean = decide_all(df, ["spec/tau"], ["A", "B"], margins, block_tests=False)
    assert all(x.block is None and x.noise.source == "pooled residual" for x in lean.verdicts)
    # a plan declaring `block_errors: pooled` judges every term against the pooled residual, and says so
    pooled = decide_all(df, ["spec/tau"], ["A", "B"], margins, block_errors="pooled")
    assert all(not x.block.used and x.noise.source == "pooled residual" for x in pooled.of("spec/tau")
               if x.term in ("A", "B"))
    assert any("block_errors: pooled" in c for c in pooled.caveats["spec/tau"])


def test_without_records_or_for_a_timed_response_there_is_no_split():
    rules = RULES  # spec/speedup is DSpark's timed response

    def split(df, r):
        return response_models(df, [r], ["A", "B"], rules).split(r)

    df = sweep(0.05, 0.2).drop(columns=[jack_name("spec/tau", g) for g in range(G)])
    assert groups_of(df, "spec/tau") == 0 and split(df, "spec/tau") is None
    timed = as_response(sweep(0.05, 0.2), "spec/speedup")  # counted in the evaluation's prompts: not its own
    assert split(timed, "spec/speedup") is None
    timed["timing/prompts"] = timed.pop("split/prompts")  # the timing pass's prompts: its own jackknife
    sp = split(timed, "spec/speedup")
    assert sp is not None and sp.kind == "timing_prompts" and "prompts of the timing pass" in sp.text()
    assert kind_of("val/bpb", rules) == "eval_batches" and kind_of("conf/ece_mean", rules) == "prompts"


def test_older_prompt_group_records_serve_a_mean_response_only():
    df = sweep(0.05, 0.3, replicates=3, seed=4)
    legacy = df.drop(columns=[jack_name("spec/tau", g) for g in range(G)])
    for g in range(4):  # a group's own value: what older evaluations recorded
        legacy[f"split/spec/tau@g{g}"] = df["spec/tau"] + np.random.default_rng(g).normal(0, 0.01, len(df))
    sp = response_models(legacy, ["spec/tau"], ["A", "B"], RULES).split("spec/tau")
    assert sp is not None and "prompt-group values" in sp.method
    # a name is no declaration: a row that declares spec/tau's count but not `mean_of_items` uses no group values
    from trials.registry import from_record

    counted = from_record({"metrics": {"spec/tau": {"items": "split/prompts", "better": "higher"}}})
    assert response_models(legacy, ["spec/tau"], ["A", "B"], counted).split("spec/tau") is None
    other = legacy.rename(columns=lambda c: c.replace("spec/tau", "conf/ece_mean"))
    assert response_models(other, ["conf/ece_mean"], ["A", "B"], RULES).split("conf/ece_mean") is None


def test_each_group_is_fitted_as_its_own_pseudo_values_would_be():
    """The model fits every group's pseudo-values on the full fit's design at once; each
    group's contrast is that of fitting its column as the response, and their variance over
    groups / G is the delete-a-group jackknife's (G - 1) / G sum (c_(-g) - mean)^2."""
    df = sweep(0.05, 0.3, replicates=3, seed=4)
    ms = response_models(df, ["spec/tau"], ["A", "B"], RULES)
    c = next(c for c in term_contrasts(ms.fits["spec/tau"], ms.rows["spec/tau"], ["A", "B"]) if c.term == "A")
    per_group = c.L @ ms.models["spec/tau"].group_params
    loo = []
    for g in range(G):
        sub = df.assign(y=df[jack_name("spec/tau", g)])
        fit = fit_response(sub, "y", ["A", "B"], "replicate", errors="pooled")
        loo.append(next(x.estimate for x in term_contrasts(fit, sub, ["A", "B"]) if x.term == "A"))
        pseudo = sub.assign(y=G * df["spec/tau"] - (G - 1) * sub["y"])
        fit = fit_response(pseudo, "y", ["A", "B"], "replicate", errors="pooled")
        assert per_group[g] == pytest.approx(next(x.estimate for x in term_contrasts(fit, pseudo, ["A", "B"])
                                                  if x.term == "A"), rel=1e-9)
    loo = np.asarray(loo)
    assert np.var(per_group, ddof=1) / G == pytest.approx((G - 1) / G * ((loo - loo.mean()) ** 2).sum(), rel=1e-9)


def _verdict(se, seeds_share, df=20.0, estimate=0.02):
    """An undecided verdict whose se^2 is split between the seeds and the items x runs."""
    v = decide(Contrast("A", "", estimate, se, df), "y", 0.01, 0.1, "higher", 3)
    v.noise = TermNoise(se ** 2 * seeds_share, df, se ** 2 * (1 - seeds_share), df * 15, 0.0, 15.0, 3,
                        "pooled residual", df)
    return v


def test_more_prompts_decide_only_what_evaluation_noise_keeps_undecided():
    v = _verdict(0.05, 0.1)
    assert v.verdict == UNDECIDED
    k = prompts_to_decide(v)  # nearly all of it is the evaluation's
    assert k is not None and k in PROMPT_FACTORS
    assert prompts_to_decide(_verdict(0.05, 0.99)) is None  # the seeds' noise stays
    assert prompts_to_decide(v, most=1.5) is None  # the plan allows no more items
    assert prompts_to_decide(v, alpha_at=lambda k: 0.0) is None  # nor alpha to test them at


def test_the_planner_prices_prompts_as_simulated_sweeps_decide():
    """Known components: a contrast's se at k times the prompts is sqrt(seed + eval / k)
    times the design's factor. The planner's multiple, from one sweep's records, is the
    right one (the smallest that decides with 80% probability at the true se) or next to it
    in most sweeps; where the seeds dominate it says prompts will not do."""
    sigma_seed, sigma_int, prompts, reps, effect, margin = 0.01, 0.5, 32, 3, 0.0, 0.1
    alpha_star = 0.05 / 2
    right = None
    for k in PROMPT_FACTORS:
        se = np.sqrt((sigma_seed ** 2 + sigma_int ** 2 / (k * prompts)) / reps)
        if p_decided(effect, se, 4 * reps - 1 - 3 - (reps - 1), alpha_star, margin) >= 0.8:
            right = k
            break
    assert right is not None and right > 1
    picked = []
    for s in range(20):
        df = sweep(sigma_seed, sigma_int, prompts=prompts, replicates=reps, effect=effect, seed=100 + s)
        c, n, _ = a_noise(df, tests=False)
        v = decide(Contrast("A", "", effect, n.se, n.df), "spec/tau", alpha_star, margin, "higher", 2)
        v.noise = n
        picked.append(prompts_to_decide(v))
    index = {k: i for i, k in enumerate(PROMPT_FACTORS)}
    steps = sorted(index[k] if k is not None else len(PROMPT_FACTORS) for k in picked)
    assert abs(steps[len(steps) // 2] - index[right]) <= 1, (right, picked)  # the median pick
    assert sum(abs(i - index[right]) <= 1 for i in steps) >= 12, (right, picked)
    c, n, _ = a_noise(sweep(0.2, 0.01, prompts=prompts, replicates=reps, effect=0.0, seed=1), tests=False)
    v = decide(Contrast("A", "", 0.0, n.se, n.df), "spec/tau", alpha_star, margin, "higher", 2)
    v.noise = n
    assert v.verdict == UNDECIDED and prompts_to_decide(v) is None


def test_more_blocks_leave_the_items_by_term_part():
    """Blocks shrink the seeds' and the items x runs parts, not the items x term part: a term
    whose se is mostly items x term is not decided by blocks at any number, and the planner
    says so; more items decide it."""
    n = TermNoise(0.0001, 20, 0.0001, 300, 0.004, 15, 3, "pooled residual", 17.0)
    se_far, _ = n.at(300, 1.0)
    assert se_far == pytest.approx(np.sqrt(0.004 + 0.0002 * 3 / 300), rel=1e-9)
    se_items, _ = n.at(3, 16.0)
    assert se_items < 0.03
    v = decide(Contrast("A", "", 0.0, n.se, n.df), "y", 0.01, 0.1, "higher", 3)
    v.noise = n
    from analysis.verdicts import blocks_to_decide

    assert v.verdict == UNDECIDED and blocks_to_decide(v, 3, 4) is None and prompts_to_decide(v) is not None


def test_plan_prices_more_prompts_against_more_blocks():
    from trials.export import SweepFrame
    from trials.sweep_record import SweepRecord
    from analysis.plan import plan_text
    from analysis.report import build_report

    df = sweep(0.005, 0.8, prompts=32, replicates=3, effect=0.0, seed=1)  # the evaluation's noise dominates
    df["run_s"] = 120.0
    df["split/decode_s_per_prompt"] = 0.5
    constructed = SweepFrame(df, factors=["A", "B"], record=SweepRecord(
        experiment="constructed", responses={"spec/tau": {"better": "higher", "margin": 0.1}}))
    text = plan_text(constructed, None)
    assert "spec/tau (primary): 2 undecided" in text
    assert max(map(len, text.splitlines())) <= 120  # wrapped for the terminal, each term's continuation under it
    joined = re.sub(r"\n {6,}", " ", text)
    a = next(line for line in joined.splitlines() if line.startswith("    A: "))
    assert "more block(s) (" in a and "x the prompts (" in a and ") on the existing checkpoints" in a
    # each price names the command that buys it, with the count it prices
    n = re.search(r"x the prompts \((\d+)\) on the existing checkpoints: trials reeval constructed --spec-prompts (\d+)", a)
    assert n and n[1] == n[2], a
    from types import SimpleNamespace

    from analysis.plan import _items_lines

    noise = {"val/bpb": SimpleNamespace(kind="eval_batches", items=8)}
    assert _items_lines(noise, {("val/bpb", "D1"): 2, ("val/bpb", "D9"): 4}, 10, None, "seedq", RULES) == [
        "every primary term decided by items alone: trials reeval seedq --eval-batches 32"]
    assert "more items alone would not" in next(line for line in joined.splitlines() if line.startswith("    B: "))
    assert "no sequential plan declared: a next look would be post hoc" in text
    assert "blocks at 2 min per trial" in text
    assert "A:B" not in text and "A:B" in plan_text(constructed, None, every=True)  # --all
    rep = build_report(constructed, None)
    assert "    noise: spec/tau: residual sigma " in rep.summary
    # no plan declared: the printed next step says, before it is taken, that it would be post hoc
    assert "next step: " in rep.brief and "that look would be POST HOC" in " ".join(rep.brief.split())


def test_a_new_study_is_priced_at_the_fewest_blocks_that_decide():
    """seed-questions' D1 on val/bpb holds an items x term part that blocks never shrink, always
    in its se: the new-study price is the fewest blocks that reach 80% (one fewer does not), and
    asks for no more held-out batches where blocks alone decide."""
    from pathlib import Path

    from analysis.sweep_reader import read_parquet
    from analysis.plan import new_study
    from analysis.power import p_decided
    from analysis.report import build_report
    from analysis.result_types import DECISION_POWER

    sweep = read_parquet(Path(__file__).resolve().parents[2] / "results" / "seed-questions" / "runs.parquet")
    d = build_report(sweep, None).decision
    v = next(v for v in d.of("val/bpb") if v.term == "D1")
    assert v.noise.item_term > 0
    plain = re.fullmatch(r"past the plan: a new study declared for it, (\d+) blocks at alpha 0\.05 over the same family",
                         new_study(v, d.family, 0.05))
    assert plain, new_study(v, d.family, 0.05)

    def power1(blocks):
        se, df = v.noise.at(blocks, 1.0)
        return p_decided(v.estimate, se, df, 0.05 / d.family, v.margin)
    assert power1(int(plain[1])) >= DECISION_POWER > power1(int(plain[1]) - 1)
    # blocks alone decide it (its items x term part is always in its se, and small beside the seeds'), so
    # the price asks for no more held-out batches
    assert new_study(v, d.family, 0.05, what="held-out batches") == plain[0]
    # the price names what buys it: `trials run` of a copy of the spec with that many blocks
    assert new_study(v, d.family, 0.05, name="seed-questions") == (
        f"{plain[0]} (`trials run` a copy of sweeps/seed-questions.yaml under a new name with replicates: {plain[1]})")

def test_the_groups_are_the_workloads_read_back_from_the_runs():
    """A workload chooses its own grouping (here 5 groups of 32 prompts, where DSpark's makes
    16): the statistics take G from the groups the runs hold, not from a rule of the engine's.
    A group left undefined in every run keeps its column, NaN: the records are named unused,
    not read as one group fewer."""
    import math

    from analysis.variance import item_records, items_unused

    df = sweep(0.05, 0.8, prompts=32, groups=5)
    assert groups_of(df, "spec/tau") == 5
    rec = item_records(df, "spec/tau", RULES)
    assert rec.groups == 5 and rec.method == "jackknife over 5 groups" and rec.items == 32
    full = df["spec/tau"].to_numpy()[:, None]
    jack = df[[f"jack/spec/tau@g{g}" for g in range(5)]].to_numpy()
    assert np.allclose(rec.pseudo, 5 * full - 4 * jack)
    df["jack/spec/tau@g4"] = math.nan  # its removal left the response undefined in every run
    assert groups_of(df, "spec/tau") == 5 and item_records(df, "spec/tau", RULES) is None
    assert "lack a group's value" in items_unused(df, "spec/tau") and "group 4" in items_unused(df, "spec/tau")
    stale = sweep(0.05, 0.8, prompts=32)  # runs whose items were metrics: a reeval on 8 prompts left g8..g15
    stale["split/prompts"] = 8.0
    assert item_records(stale, "spec/tau", RULES).groups == 8


def test_item_records_a_run_lacks_are_named_not_dropped_silently():
    """One run without a group's value (a NaN in an export: damage, or a group left undefined)
    leaves the response without item records; the report says so, naming the run, where the
    noise line would otherwise just disappear (issue 61's probe)."""
    import math
    from pathlib import Path

    from analysis.report import build_report
    from analysis.sweep_reader import read_parquet
    from analysis.variance import items_unused

    sweep = read_parquet(Path(__file__).resolve().parents[2] / "results" / "paper-drafter-confirm-d2-spec-tau" /
                         "runs.parquet")
    assert items_unused(sweep.runs, "spec/tau") == ""
    runs = sweep.runs.copy()
    runs.loc[runs.index[3], "jack/spec/tau@g0"] = math.nan
    said = items_unused(runs, "spec/tau")
    assert said.startswith("spec/tau: its item records are not used (1 run(s) lack a group's value, e.g. ") and \
        f"{runs['run_name'].iloc[3]} group 0" in said
    assert said in build_report(sweep.with_runs(runs), None).summary.splitlines()
