"""The link both ways between a screening study and its confirmations.

A confirmation (`analysis plan NAME --confirm TERM`) carries `confirms:` in its spec, kept
on its parent run and in its parquet export: the screening study, the term, the response
and the estimate it started from. Its report names them (`analysis.rendering.words.confirms_line`). The screening
study's report lists the confirmations found for it, each with its own verdict
(`confirmation_lines`): in the same MLflow store (`in_store`), or, for the committed studies,
in the sibling folders of `results/` (`in_folders`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from trials.store.client import tracking_client
from trials.store.keys import CONFIRMS_TAG, SWEEP_PARENT_TAG, SWEEP_TAG

from .anova import AnalysisError
from trials.export import SweepFrame
from .sweep_reader import load_runs, read_parquet


def confirmation_lines(found: list[SweepFrame | str]) -> list[str]:
    """One line per confirmation run for a screening study: its verdict, estimate and
    interval on its one question, at the blocks it has (or why it has none yet); then, where
    there are several, the family they make (`family_lines`)."""
    from .report import build_report

    lines = [f for f in found if isinstance(f, str)]  # a confirmation that could not be read: why
    claims = []
    for conf in sorted((f for f in found if not isinstance(f, str)), key=lambda s: s.record.experiment):
        c, name = conf.record.confirms, conf.record.experiment
        try:
            rep = build_report(conf, None)
        except AnalysisError as e:
            lines.append(f"confirmation {name} ({c['term']} on {c['response']}): no verdict yet ({str(e)[:120]})")
            continue
        v = next((x for x in rep.decision.of(c["response"]) if x.in_family), None)
        blocks = conf.runs["replicate"].nunique()
        if v is None:
            lines.append(f"confirmation {name} ({c['term']} on {c['response']}): no verdict at {blocks} blocks")
            continue
        lo, hi, _ = v.interval()  # the interval the decision used (TOST's for negligible)
        lines.append(f"confirmation {name}: {c['term']} on {c['response']} {v.verdict}, {v.estimate:+.4g} "
                     f"[{lo:+.4g}, {hi:+.4g}] at {blocks} blocks")
        plan = rep.look.plan if rep.look is not None else None
        claims.append((name, v, plan.alpha if plan is not None else rep.decision.alpha))
    return lines + family_lines(claims)


def family_lines(claims: list[tuple[str, object, float]]) -> list[str]:
    """The family the confirmations of one screening make, in words: each is a family of one
    question at its own alpha, so together their familywise error is up to 1 - prod(1 -
    alpha_i); and a Holm view across them. Holm's step-down on each claim's ratio r = p /
    (the nominal level it was decided at): a claim holds at its own alpha where r <= 1, and
    across the k confirmations at rank i (r ascending) where every r up to it is at most
    1 / (k - i + 1) (the levels scaled as alpha is, which Pocock-type levels nearly are).
    `claims`: (confirmation, its verdict, its alpha)."""
    if len(claims) < 2:
        return []
    fwer = 1 - math.prod(1 - a for _, _, a in claims)
    out = [f"the {len(claims)} confirmations are {len(claims)} families of one question each, at alpha "
           f"{', '.join(f'{a:g}' for _, _, a in claims)}: together, a familywise error of up to {fwer:.3g} "
           f"(Bonferroni's bound {sum(a for _, _, a in claims):.3g})"]
    ratios = []
    for name, v, _ in claims:
        if v.snapshot() is None:  # undecided: no claim
            continue
        p, level = (v.p, v.alpha_star) if v.matters else (v.p_equiv, v.alpha_equiv)
        if p is not None and level and level > 0:
            ratios.append((p / level, name, v.verdict))
    k, held = len(claims), True
    words = []
    for i, (r, name, verdict) in enumerate(sorted(ratios)):
        held = held and r <= 1 / (k - i)
        words.append(f"{name} ({verdict}) {'holds' if held else 'does not hold'}")
    if words:
        out.append(f"Holm across the {k} (familywise alpha as each one's): " + "; ".join(words)
                   + ("" if len(ratios) == k else f"; {k - len(ratios)} undecided, no claim"))
    return out


def in_folders(folder: str | Path, experiment: str) -> list[SweepFrame]:
    """The confirmations of `experiment` among the studies beside `folder` (results/*/runs.parquet)."""
    out = []
    for path in sorted(Path(folder).resolve().parent.glob("*/runs.parquet")):
        try:
            sweep = read_parquet(path)
        except ValueError:
            continue  # a damaged neighbour is its own report's error, not this one's
        if sweep.record.confirms.get("study") == experiment:
            out.append(sweep)
    return out


def in_store(tracking_uri: str | None, experiment: str) -> list[SweepFrame | str]:
    """The confirmations of `experiment` among the sweeps of the same MLflow store; one that
    cannot be read (a damaged record, a malformed `confirms` tag naming the study) as a line
    saying so, so that one damaged study never stops the screening's report or hides its link."""
    client = tracking_client(tracking_uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return []
    parents = client.search_runs(ids, filter_string=f"tags.{SWEEP_PARENT_TAG} = 'true'", max_results=1000)
    names, out = [], []
    for run in parents:
        text, name = run.data.tags.get(CONFIRMS_TAG) or "{}", run.data.tags.get(SWEEP_TAG)
        try:
            study = json.loads(text).get("study")
        except (ValueError, AttributeError, RecursionError):
            if name and experiment in text:
                out.append(f"confirmation {name}: its confirms record is malformed ({text[:80]!r}); not read")
            continue
        if study == experiment and name:
            names.append(name)
    for name in sorted(set(names)):
        try:
            out.append(load_runs(name, tracking_uri))
        except (AnalysisError, ValueError, KeyError) as e:
            out.append(f"confirmation {name}: cannot be read ({' '.join(str(e).split())[:300]})")
    return out
