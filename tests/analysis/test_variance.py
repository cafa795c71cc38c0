"""analysis.variance on constructed data whose components are known: per run a seed effect
(between-seed sigma) plus per prompt a common prompt effect (cancels in contrasts) and a
prompt x run interaction (the evaluation's noise)."""

import itertools

import numpy as np
import pandas as pd
import pytest

from analysis.variance import groups_of, prompts_to_decide, split
from analysis.verdicts import Contrast, decide

G = 4


def sweep(sigma_seed, sigma_int, prompts=32, replicates=6, effect=0.3, seed=0):
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 0.5, prompts)  # every run decodes the same prompts: cancels in contrasts
    rows = []
    for r in range(replicates):
        for a, b in itertools.product(("lo", "hi"), repeat=2):
            mu = 2.0 + (effect / 2 if a == "hi" else -effect / 2) + rng.normal(0, sigma_seed)
            y = mu + common + rng.normal(0, sigma_int, prompts)  # (P,)
            row = {"A": a, "B": b, "replicate": r, "y": float(y.mean()), "split/prompts": float(prompts)}
            for g in range(G):
                row[f"split/y@g{g}"] = float(y[g::G].mean())
            rows.append(row)
    df = pd.DataFrame(rows)
    for f in "AB":
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    return df


@pytest.mark.parametrize("sigma_seed,sigma_int", [(0.05, 0.4), (0.1, 0.1), (0.1, 0.0001)])
def test_the_split_recovers_known_components(sigma_seed, sigma_int):
    evals, seeds = [], []
    for s in range(30):
        sp = split(sweep(sigma_seed, sigma_int, seed=s), "y", ["A", "B"])
        evals.append(sp.sigma_eval ** 2)
        seeds.append(sp.sigma_seed ** 2)
        assert sp.sigma_eval ** 2 + sp.sigma_seed ** 2 == pytest.approx(sp.sigma ** 2, rel=1e-9) or \
            sp.sigma_eval == pytest.approx(sp.sigma)
    true_eval = sigma_int ** 2 / 32  # a run's mean over 32 prompts
    assert np.mean(evals) == pytest.approx(true_eval, rel=0.25, abs=2e-4)
    assert np.mean(seeds) == pytest.approx(sigma_seed ** 2, rel=0.35, abs=2e-4)


def test_without_prompt_groups_there_is_no_split():
    df = sweep(0.05, 0.2).drop(columns=[f"split/y@g{g}" for g in range(G)])
    assert groups_of(df, "y") == 0 and split(df, "y", ["A", "B"]) is None


def test_more_prompts_decide_only_what_evaluation_noise_keeps_undecided():
    v = decide(Contrast("A", "", 0.02, 0.05, 20), "y", 0.01, 0.1, "higher", 3)
    assert v.verdict == "undecided"
    k = prompts_to_decide(v, var_eval=0.05 ** 2 * 0.9)  # nearly all of it is the evaluation's
    assert k is not None and k in (2, 4, 8, 16)
    assert prompts_to_decide(v, var_eval=0.05 ** 2 * 0.01) is None  # the seeds' noise stays


def test_plan_prices_more_prompts_against_more_blocks():
    from analysis.plan import plan_text
    from analysis.report import build_report

    df = sweep(0.005, 0.8, prompts=32, replicates=3, effect=0.0, seed=1)  # the evaluation's noise dominates
    df["cell"] = "A=" + df["A"].astype(str) + "|B=" + df["B"].astype(str)
    df["run_s"] = 120.0
    df["split/decode_s_per_prompt"] = 0.5
    df.attrs.update(factors=["A", "B"], experiment="constructed", responses={"y": {"better": "higher", "margin": 0.2}})
    text = plan_text(df, None)
    assert "y (primary): " in text and "evaluation" in text and "between seeds" in text
    assert "x the prompts (" in text and "per evaluation) on the existing checkpoints" in text
    # 2x the prompts: reeval decodes all 64 in each of the 12 runs, x 0.5 s = 6.4 minutes of decoding
    assert "every primary term decided by prompts alone: trials reeval NAME --spec-prompts 64, about 6 " \
           "worker-minutes of decoding" in text
    assert "blocks priced at 2 min per trial" in text and "every primary term decided by blocks alone" in text
    rep = build_report(df, None)
    assert "    noise: y: residual sigma " in rep.summary


def test_each_prompt_group_is_fitted_as_its_own_response_would_be():
    """split fits the groups on the full fit's design; the estimates are those of fitting each
    group's column as the response (fit_response on it, as a plan did before)."""
    from analysis.verdicts import contrasts, fit_response

    df = sweep(0.05, 0.3, replicates=3, seed=4)
    sp = split(df, "y", ["A", "B"])
    by_group = {}
    for g in range(G):
        sub = df.assign(y=df[f"split/y@g{g}"])
        for c in contrasts(fit_response(sub, "y", ["A", "B"], "replicate", errors="OLS"), sub, ["A", "B"]):
            by_group.setdefault(c.term, []).append(c.estimate)
    assert sp.var_eval.keys() == by_group.keys()
    for term, values in by_group.items():
        assert sp.var_eval[term] == pytest.approx(np.var(values, ddof=1) / G, rel=1e-9)
