"""Every claim's error rate across a whole sequential plan, on simulated studies run through
the product's own look chain: `analysis.sequential` (Plan, information fractions,
group-sequential boundaries for the t statistics on their df, binding decisions recorded on
each look) and `analysis.verdicts.decide_all` (each term's own block x term error, its items
x term part).

Designs like the committed studies, each with the plan the tool declares for it: a 2^3
factorial of at most 4 or 6 blocks and a 2^(5-1) half fraction (E = ABCD) of at most 10,
looked at a block at a time from 2 blocks (3 for the half fraction), as `trials augment
--until-decided` does; and two-arm confirmations (`analysis plan --confirm`) with looks at
12 and 24 blocks and at 65 and 130. Each study stops once every family term is decided. One
primary response evaluated on 32 prompts in 16 jackknife groups; the family is the main
effects, the margin one seed sd. Each run: a block effect, seed noise (sd 1), each prompt's
noise, and where asked a block x term interaction (a seed that favours one arm: the term's
effect varies from block to block with the sd given) or an items x term one (a prompt that
favours A's high level in every block, sd of A's effect 0.5).

    python bench/error_rates.py                 # 600 studies per row (about an hour here)
    python bench/error_rates.py --studies 40    # a quick look (Monte Carlo errors printed)
    python bench/error_rates.py --studies 1600 --seed 7 --only '2^3 in 4/no interaction'  # one row again

Prints, per design and scenario, the family-wise rate of the error the scenario can make,
across every look:
- every true effect zero: any rejection of zero, counted from the words: every verdict that
  asserts an effect ("matters, beyond the margin", "matters, size unsure", "detected, smaller
  than the margin": `Verdict.asserts_effect`);
- every true effect at the margin ("at the margin"): any verdict "negligible", which claims
  the effect lies inside it;
with its Monte Carlo error, whether it lies within alpha plus two of them, and the power to
call a true zero "negligible" (the share of family terms that end so). The `pooled` row shows
what declaring `block_errors: pooled` costs where a seed favours one arm.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import numpy as np
import pandas as pd

from analysis.looks import LookResult
from analysis.sequential import Plan, information_fraction, information_fractions
from analysis.result_types import NEGLIGIBLE, UNDECIDED
from analysis.verdicts import decide_all, response_models
from trials.store.items import jack_groups, jack_name
from trials.workload import load_workload

RESPONSE = "spec/tau"
# its row: which count its items are drawn on (`split/prompts`), as the statistics read it
RULES = load_workload("dspark").registry
PROMPTS = 32
G = jack_groups(PROMPTS)  # the groups the trainer keeps for this many prompts
SIGMA_PROMPT = 1.0  # per prompt of a run (a run's mean over 32 prompts: sd 0.18)
MARGIN, ALPHA = 1.0, 0.05
DESIGNS = {  # name -> (factors, generator, the blocks of each look, the plan's maximum)
    "2^3 in 3": ("ABC", None, (2, 3), 3), "2^3 in 4": ("ABC", None, (2, 3, 4), 4),
    "2^3 in 6": ("ABC", None, (2, 3, 4, 5, 6), 6), "2^(5-1) in 10": ("ABCDE", "E=ABCD", tuple(range(3, 11)), 10),
    "two arms 12/24": ("A", None, (12, 24), 24), "two arms 65/130": ("A", None, (65, 130), 130)}
SCENARIOS = {  # name -> (block x term sd on A, on every main effect, items x term sd on A, every true effect)
    "no interaction": (0.0, 0.0, 0.0, 0.0), "block x term 0.5 sigma on A": (0.5, 0.0, 0.0, 0.0),
    "block x term sigma on A": (1.0, 0.0, 0.0, 0.0), "block x term sigma on every main effect": (0.0, 1.0, 0.0, 0.0),
    "items x term on A": (0.0, 0.0, 0.5, 0.0), "at the margin": (0.0, 0.0, 0.0, MARGIN)}
ROWS = [  # (design, scenario, rule): the committed table
    *[(d, s, "own") for d in ("2^3 in 4", "2^3 in 6") for s in
      ("no interaction", "block x term sigma on A", "block x term sigma on every main effect", "items x term on A",
       "at the margin")],
    ("2^3 in 6", "block x term sigma on A", "pooled"),
    *[("2^(5-1) in 10", s, "own") for s in
      ("no interaction", "block x term sigma on A", "block x term sigma on every main effect", "at the margin")],
    *[("two arms 12/24", s, "own") for s in ("no interaction", "block x term sigma on A", "items x term on A",
                                             "at the margin")],
    *[("two arms 65/130", s, "own") for s in ("no interaction", "items x term on A", "at the margin")]]


def cells(factors: str, generator: str | None) -> np.ndarray:
    """The design's cells as +-1 codes, (cells, factors)."""
    if generator is None:
        return np.array(list(itertools.product((-1, 1), repeat=len(factors))), float)
    base = np.array(list(itertools.product((-1, 1), repeat=len(factors) - 1)), float)
    return np.column_stack([base, base.prod(axis=1)])  # the last factor = the product of the others


def study(rng, codes: np.ndarray, factors: str, blocks: int, bt_a: float, bt_all: float, it_a: float,
          effect: float = 0.0) -> dict:
    """One study's latent draws for every block it may reach (`effect`: every main effect's
    true size, high minus low)."""
    n_cells, k = codes.shape
    bt = np.full((blocks, k), float(effect))
    bt[:, 0] += rng.normal(0, bt_a, blocks)
    bt += rng.normal(0, bt_all, (blocks, k))
    return {"block": rng.normal(0, 0.5, blocks), "bt": bt, "seed": rng.normal(0, 1.0, (blocks, n_cells)),
            "it": rng.normal(0, it_a * math.sqrt(PROMPTS), PROMPTS),  # A's items x term sd: it_a
            "prompt": rng.normal(0, SIGMA_PROMPT, (blocks, n_cells, PROMPTS)), "common": rng.normal(0, 1, PROMPTS)}


def frame(d: dict, codes: np.ndarray, factors: str, blocks: int) -> pd.DataFrame:
    """The runs of the first `blocks` blocks, with the jackknife records the trainer keeps
    (prompt i in group i mod G): every main effect at its true size (`study`), plus the
    interactions'."""
    b = np.arange(blocks)
    mean = d["block"][b, None] + (codes[None, :, :] * d["bt"][b, None, :]).sum(axis=2) / 2  # (B, cells)
    per = (mean[:, :, None] + d["seed"][b][:, :, None] + d["common"][None, None, :]
           + codes[None, :, 0, None] * d["it"][None, None, :] / 2 + d["prompt"][b])  # (B, cells, P)
    groups = np.arange(PROMPTS) % G
    full = per.mean(axis=2)
    rows = []
    for i in range(blocks):
        for c in range(codes.shape[0]):
            row = {f: "hi" if v > 0 else "lo" for f, v in zip(factors, codes[c])}
            row.update(replicate=i, cell="|".join(f"{f}={row[f]}" for f in factors), **{"split/prompts": PROMPTS})
            row[RESPONSE] = float(full[i, c])
            for g in range(G):
                row[jack_name(RESPONSE, g)] = float(per[i, c, groups != g].mean())
            rows.append(row)
    df = pd.DataFrame(rows)
    for f in factors:
        df[f] = pd.Categorical(df[f], ["lo", "hi"], ordered=True)
    return df


def run_plan(rng, design: str, scenario: tuple, rule: str = "own") -> tuple[bool, float]:
    """One study through the plan's looks: (the scenario's error made at any look: a
    rejection of zero where every true effect is zero, a "negligible" where every one is at
    the margin; the share of the family ended "negligible")."""
    factors, generator, looks, most = DESIGNS[design]
    codes = cells(factors, generator)
    d = study(rng, codes, factors, most, *scenario)
    at_margin = scenario[3] != 0
    plan = Plan(most, ALPHA, block_errors=rule, look_every=looks[1] - looks[0] if len(looks) > 1 else None)
    margins = {RESPONSE: {"better": "higher", "margin": MARGIN}}
    wrong, final = False, {}
    for blocks in looks:
        df = frame(d, codes, factors, blocks)
        models = response_models(df, [RESPONSE], list(factors), RULES)
        sp = models.split(RESPONSE)
        shares = {RESPONSE: (sp.kind, sp.share) if sp is not None else ("", 0.0)}
        evaluation = {"prompts": PROMPTS}
        look, new = plan.look(f"{blocks}", blocks, evaluation, information_fraction(plan, blocks, evaluation, shares),
                              fractions=information_fractions(plan, blocks, evaluation, shares))
        result = LookResult(look.alpha, look, plan.looks.index(look) + 1, new, plan)
        dec = decide_all(df, [RESPONSE], list(factors), margins, result.family_alpha, models=models, rules=RULES,
                         block_errors=rule, levels=result.levels, binding=result.binding())
        result.record(dec.verdicts)
        fam = dec.family_verdicts()
        # every wording that asserts an effect is a rejection of zero; "negligible" claims |effect| < margin
        wrong |= any(v.verdict == NEGLIGIBLE for v in fam) if at_margin else any(v.asserts_effect for v in fam)
        final = {v.term: v.verdict for v in fam}
        if all(v.verdict != UNDECIDED for v in fam):
            break
    return wrong, sum(v == NEGLIGIBLE for v in final.values()) / max(len(final), 1)


def rows(n: int, seed: int, which=None):
    """(design, scenario, rule, error rate, its Monte Carlo error, negligible power) per row of
    `which` (default ROWS), as computed."""
    rng = np.random.default_rng(seed)
    for design, name, rule in which or ROWS:
        out = [run_plan(rng, design, SCENARIOS[name], rule) for _ in range(n)]
        rate = float(np.mean([o[0] for o in out]))
        mc = math.sqrt(max(ALPHA * (1 - ALPHA), rate * (1 - rate)) / n)
        yield design, name, rule, rate, mc, float(np.mean([o[1] for o in out]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--studies", type=int, default=600, help="simulated studies per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="one row (the first design and scenario) of --studies studies: that the script runs")
    ap.add_argument("--only", action="append", metavar="DESIGN/SCENARIO",
                    help="only this row (repeatable), e.g. '2^3 in 4/no interaction': a row run again with more studies")
    args = ap.parse_args()
    if args.studies < 10:
        ap.error("--studies must be >= 10")
    which = ROWS[:1] if args.check else None
    if args.only:
        which = [r for r in ROWS if f"{r[0]}/{r[1]}" in args.only and r[2] == "own"]
        if len(which) != len(set(args.only)):
            ap.error(f"--only: rows are DESIGN/SCENARIO of: {', '.join(sorted({f'{d}/{s}' for d, s, _ in ROWS}))}")
    t0 = time.perf_counter()
    print(f"every claim's error across the whole plan (binding looks, boundaries for the t statistics on their df), "
          f"{args.studies} studies a row; alpha {ALPHA} family-wise, margin {MARGIN:g} seed sd; family: the main "
          "effects; counted: every wording that asserts an effect where the true effects are zero, every "
          "'negligible' where they are at the margin")
    print(f"{'design':<16} {'scenario':<40} {'rule':<7} {'error counted':<16} {'rate':>15} {'<= alpha + 2 MC':>16} "
          f"{'negligible (power)':>19}")
    worst = 0.0
    for design, name, rule, rate, mc, power in rows(args.studies, args.seed, which):
        ok = rate <= ALPHA + 2 * mc
        if rule == "own":
            worst = max(worst, (rate - ALPHA) / mc)
        what = "negligible" if SCENARIOS[name][3] else "rejects zero"
        print(f"{design:<16} {name:<40} {rule:<7} {what:<16} {rate:>7.3f} +- {mc:.3f} {'yes' if ok else 'NO':>16} "
              f"{'' if SCENARIOS[name][3] else f'{power:.2f}':>19}", flush=True)
    print(f"\nthe default rule (own): the largest excess over alpha, {worst:+.1f} Monte Carlo errors; "
          f"{(time.perf_counter() - t0) / 60:.1f} min")


if __name__ == "__main__":
    main()
