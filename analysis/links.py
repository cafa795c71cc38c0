"""The link both ways between a screening study and its confirmations.

A confirmation (`analysis plan NAME --confirm TERM`) carries `confirms:` in its spec, kept
on its parent run and in its parquet export: the screening study, the term, the response
and the estimate it started from. Its report names them (`analysis.render.confirms_line`). The screening
study's report lists the confirmations found for it, each with its own verdict
(`confirmation_lines`): in the same MLflow store (`in_store`), or, for the committed studies,
in the sibling folders of `results/` (`in_folders`).
"""

from __future__ import annotations

import json
from pathlib import Path

from trials.store.client import tracking_client
from trials.store.keys import CONFIRMS_TAG, SWEEP_PARENT_TAG, SWEEP_TAG

from .anova import AnalysisError
from .frame import SweepFrame
from .sweep_reader import load_runs, read_parquet


def confirmation_lines(found: list[SweepFrame]) -> list[str]:
    """One line per confirmation run for a screening study: its verdict, estimate and
    interval on its one question, at the blocks it has (or why it has none yet)."""
    from .report import build_report

    lines = []
    for conf in sorted(found, key=lambda s: s.record.experiment):
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
    return lines


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


def in_store(tracking_uri: str | None, experiment: str) -> list[SweepFrame]:
    """The confirmations of `experiment` among the sweeps of the same MLflow store."""
    client = tracking_client(tracking_uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return []
    parents = client.search_runs(ids, filter_string=f"tags.{SWEEP_PARENT_TAG} = 'true'", max_results=1000)
    names = []
    for run in parents:
        try:
            study = json.loads(run.data.tags.get(CONFIRMS_TAG) or "{}").get("study")
        except (ValueError, AttributeError):
            continue
        if study == experiment and run.data.tags.get(SWEEP_TAG):
            names.append(run.data.tags[SWEEP_TAG])
    return [load_runs(n, tracking_uri) for n in sorted(set(names))]
