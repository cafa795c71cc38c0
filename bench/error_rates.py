"""False verdicts of the whole plan, and the intervals' coverage, on simulated studies run
through the product's own statistics: `analysis.verdicts.response_models` and `decide_all`
(the variance model: block x term and items x term where their tests reject), the
information scale and alpha spending of `analysis.sequential`.

Studies shaped like the committed paper study: a 2^3 factorial, one response evaluated on 32
prompts in 16 jackknife groups (extended to 96 by a re-evaluation) and one without item
records, 2 blocks at the first look, then a look at 96 prompts, then a block at a time up to
6, stopping once every family term is decided (as `trials augment --until-decided` does).
Each run: seed noise, the prompts' noise (a prompt x run interaction), and where asked a
block x term interaction on A (a seed that favours A's high level) and an items x term one
(a prompt that favours it in every block).

    python bench/error_rates.py                 # 300 studies per scenario (about 20 min here)
    python bench/error_rates.py --studies 40    # a quick look (Monte Carlo errors printed)

Prints, per scenario: the chance of any false "matters" across every look when no term has
an effect (the plan keeps it at alpha 0.05), the chance of any false "negligible" when every
main effect equals its margin (likewise), and the coverage of A's 95% interval at one look
of 4 blocks with the block x term standard deviation from 0 up (the preliminary test pools a
small interaction it does not detect, which is what coverage below 95% measures).
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np
import pandas as pd
from scipy import stats

from analysis.sequential import Plan, information_fraction
from analysis.types import BEYOND, NEGLIGIBLE, UNDECIDED, UNSURE
from analysis.verdicts import decide_all, response_models
from trials.registry import jack_name

FACTORS = ("A", "B", "C")
CELLS = list(itertools.product((-1, 1), repeat=3))
G, FIRST, MOST = 16, 32, 96
MARGINS = {"spec/tau": 0.1, "spec/tau_greedy": 0.1}  # both primary; the second carries no item records
SIGMA_SEED, SIGMA_PROMPT = 0.03, 0.35  # per run; per prompt of a run (a run's mean over P prompts: / sqrt(P))
ALPHA = 0.05


def simulate(rng, effect: float, blocks: int, sigma_bt: float, sigma_it: float) -> dict:
    """One study's latent draws, enough for every look: per block and cell a seed effect, per
    prompt its noise; the interactions on A."""
    return {"effect": effect, "seed": rng.normal(0, SIGMA_SEED, (blocks, 8)), "greedy": rng.normal(0, 0.05, (blocks, 8)),
            "block": rng.normal(0, 0.02, blocks), "bt": rng.normal(0, sigma_bt, blocks),
            "it": rng.normal(0, sigma_it, MOST), "prompt": rng.normal(0, SIGMA_PROMPT, (blocks, 8, MOST)),
            "common": rng.normal(0, 0.5, MOST)}


def frame(d: dict, blocks: int, prompts: int) -> pd.DataFrame:
    """The runs of the first `blocks` blocks evaluated on the first `prompts` prompts, with
    the jackknife records the trainer keeps (item i in group i mod G)."""
    rows = []
    groups = np.arange(prompts) % G
    for b in range(blocks):
        for c, codes in enumerate(CELLS):
            x = dict(zip(FACTORS, codes))
            mean = 2.0 + d["effect"] * sum(x.values()) / 2 + d["block"][b] + x["A"] * d["bt"][b] / 2
            per = (mean + d["seed"][b, c] + d["common"][:prompts] + x["A"] * d["it"][:prompts] / 2
                   + d["prompt"][b, c, :prompts])  # (P,): the run's value on each prompt
            row = {f: "hi" if v > 0 else "lo" for f, v in x.items()}
            row.update(replicate=b, cell="|".join(f"{f}={row[f]}" for f in FACTORS))
            row["split/prompts"] = float(prompts)
            row["spec/tau"] = float(per.mean())
            for g in range(G):
                row[jack_name("spec/tau", g)] = float(per[groups != g].mean())
            row["spec/tau_greedy"] = mean + d["seed"][b, c] + d["greedy"][b, c]
            rows.append(row)
    df = pd.DataFrame(rows)
    for f in FACTORS:
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    return df


def one_study(rng, effect: float, sigma_bt: float, sigma_it: float, rule: str = "test",
              decided: bool = False) -> tuple:
    """Run the plan on one study: (any false matters, any false negligible) over its looks,
    and with `decided` whether every family term ended decided (the plan's power); `rule`:
    the plan's `block_errors`."""
    d = simulate(rng, effect, 6, sigma_bt, sigma_it)
    plan = Plan(6, ALPHA, max_prompts=MOST)
    margins = {r: {"better": "higher", "margin": m} for r, m in MARGINS.items()}
    false_matters = false_negligible = False
    for k, (blocks, prompts) in enumerate([(2, FIRST), (2, MOST)] + [(b, MOST) for b in range(3, 7)]):
        df = frame(d, blocks, prompts)
        models = response_models(df, list(MARGINS), list(FACTORS))
        shares = {r: (sp.kind, sp.share) if (sp := models.split(r)) is not None else ("", 0.0) for r in MARGINS}
        t = information_fraction(plan, blocks, {"prompts": prompts}, shares)
        try:
            look, _ = plan.look(f"{blocks}x{prompts}", blocks, {"prompts": prompts}, t)
        except ValueError:  # no information added: no look
            continue
        dec = decide_all(df, list(MARGINS), list(FACTORS), margins, alpha=look.alpha, models=models,
                         block_errors=rule)
        fam = [v for v in dec.family_verdicts() if ":" not in v.term]
        if effect == 0:
            false_matters |= any(v.verdict in (BEYOND, UNSURE) for v in fam)
        else:
            false_negligible |= any(v.verdict == NEGLIGIBLE for v in fam)
        if all(v.verdict != UNDECIDED for v in fam):
            return (false_matters, false_negligible, True) if decided else (false_matters, false_negligible)
    return (false_matters, false_negligible, False) if decided else (false_matters, false_negligible)


def coverage(rng, n: int, sigma_bt: float, sigma_it: float, blocks: int = 4, rule: str = "test") -> float:
    """How often A's 95% interval (its model's se and df) holds the true effect, at one look."""
    hits = 0
    for _ in range(n):
        d = simulate(rng, 0.1, blocks, sigma_bt, sigma_it)
        df = frame(d, blocks, FIRST)
        dec = decide_all(df, ["spec/tau"], list(FACTORS), {"spec/tau": {"better": "higher", "margin": 0.1}},
                         alpha=ALPHA, block_errors=rule)
        a = next(v for v in dec.of("spec/tau") if v.term == "A")
        hits += abs(a.estimate - 0.1) <= stats.t.ppf(0.975, a.df) * a.se
    return hits / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--studies", type=int, default=300, help="simulated studies per scenario")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.studies < 10:
        ap.error("--studies must be >= 10")
    rng = np.random.default_rng(args.seed)
    n, t0 = args.studies, time.perf_counter()
    mc = lambda p: math.sqrt(max(p * (1 - p), 1 / n) / n)  # noqa: E731
    print(f"the whole plan (2 blocks x 32 prompts, then 96 prompts, then a block at a time to 6), {n} studies each; "
          f"alpha {ALPHA}")
    print(f"{'block_errors, interactions on A':<40} {'false matters (null)':>22} {'false negligible (margin)':>26} "
          f"{'decided (margin)':>17}")
    for rule, name, bt, it in (("test", "none", 0.0, 0.0), ("test", "block x term sd 0.04", 0.04, 0.0),
                               ("test", "items x term sd 0.3", 0.0, 0.3), ("test", "both", 0.04, 0.3),
                               ("own", "none", 0.0, 0.0), ("own", "block x term sd 0.04", 0.04, 0.0)):
        fm = np.mean([one_study(rng, 0.0, bt, it, rule)[0] for _ in range(n)])
        margin = [one_study(rng, MARGINS["spec/tau"], bt, it, rule, decided=True) for _ in range(n)]
        fn, done = np.mean([m[1] for m in margin]), np.mean([m[2] for m in margin])
        print(f"{rule + ', ' + name:<40} {fm:>14.3f} +- {mc(fm):.3f} {fn:>18.3f} +- {mc(fn):.3f} {done:>17.2f}",
              flush=True)
    se = math.sqrt((SIGMA_SEED ** 2 + SIGMA_PROMPT ** 2 / FIRST) / 4)
    print(f"\ncoverage of A's 95% interval at one look of 4 blocks x 32 prompts ({n} studies each; A's se without "
          f"interactions about {se:.3f}; a block x term sd s adds s / 2 to it)")
    for bt in (0.0, 0.02, 0.04, 0.08):
        cov = {rule: coverage(rng, n, bt, 0.0, rule=rule) for rule in ("test", "own")}
        print(f"  block x term sd {bt:<5g} test: {cov['test']:.3f} +- {mc(cov['test']):.3f}   own: {cov['own']:.3f} "
              f"+- {mc(cov['own']):.3f}", flush=True)
    print(f"\n{(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
