"""What the analysis writes back to a sweep's store: a look's record on the parent run
(`record_look`, kept in storage first so that `trials recover` rebuilds it) and a report's
verdicts (note, table artifact and counts) and files (`log_to_parent`). The store's reading side is
`analysis.sweep_reader`.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from trials.store.client import set_tags, tracking_client
from trials.store.kept import keep_parent_record, sweep_storage
from trials.store.keys import ALPHA_TAG, LOOK_PREFIX, MARGINS_TAG, NOTE_TAG, SEQUENTIAL_TAG, VERDICT_PREFIX

from . import links
from .anova import AnalysisError
from trials.export import SweepFrame
from .rendering.words import parent_note
from .report import build_report
from .sweep_reader import load_runs
from .report_types import Report
from .verdicts import COUNT_METRICS


def record_look(sweep: SweepFrame, tracking_uri: str | None, plan_json: str, look_text: str, index: int) -> None:
    """A look on the sweep's parent run: the sequential record with every look so far (the
    tag `analysis.sequential` reads back) and the look's own line (`look.<k>`). Kept in the
    sweep's storage first where this machine sees it (`trials.store.kept`), so that `trials
    recover` rebuilds the looks, and the alpha they spent, with the sweep."""
    record = sweep.record
    if not record.parent_run_id:
        return
    client = tracking_client(tracking_uri)
    tags = {SEQUENTIAL_TAG: plan_json, f"{LOOK_PREFIX}{index}": look_text[:5000]}
    exp_dir = sweep_storage(client.get_run(record.parent_run_id).data.tags, record.experiment)
    if exp_dir is not None:
        keep_parent_record(exp_dir, "look", tags)
    set_tags(client, record.parent_run_id, tags)  # the record past MLflow's 8,000 characters: in parts


def log_to_parent(rep: Report, sweep: SweepFrame, tracking_uri: str | None) -> None:
    """The attribution on the sweep's parent run, where its page shows the answer: the run's
    description (`mlflow.note.content`: a sentence per primary response first, then the
    verdict table and a link to the report), the verdict table as one artifact
    (`attribution/verdicts.csv`) beside the report files, four headline metrics (how many of
    the family's verdicts are in each state, `verdicts/matters_beyond`, ..., at the look's index
    as the step, no point where no count changed), and two tags of
    what the verdicts rest on (the margins; the alpha and the family). No tag per verdict: the
    page listed dozens of them above the answer. Any `verdict.*` tag an earlier version left
    is deleted, so that no stale verdict stays beside the new ones."""
    from mlflow.entities import Metric, RunTag  # MLflow: only where a report is logged

    parent = sweep.record.parent_run_id
    if not parent:
        raise AnalysisError("these runs have no parent run to log the attribution on")
    client = tracking_client(tracking_uri)
    d = rep.decision

    run = client.get_run(parent).data  # its tags and metrics as they stand, read once
    for stale in run.tags:
        if stale.startswith(VERDICT_PREFIX):
            client.delete_tag(parent, stale)
    used = {r: {"better": c.better, "margin": c.margin} for r, c in d.checks.items() if c.margin is not None}
    tags = [RunTag(ALPHA_TAG, json.dumps({"alpha": d.alpha, "alpha_star": d.alpha_star, "levels": d.levels, "family": d.family,
                                          "terms": d.primary_terms})),
            RunTag(NOTE_TAG, parent_note(rep, sweep))]  # the run page's description
    if used:  # no empty tag
        tags.insert(0, RunTag(MARGINS_TAG, json.dumps(used)[:5000]))
    ts, step = int(time.time() * 1000), rep.look.index if rep.look is not None else 0
    # one point a look (its index the step): a report of the same counts adds none
    counts = [Metric(COUNT_METRICS[k], float(n), ts, step) for k, n in d.counts().items()]
    if all(run.metrics.get(m.key) == m.value for m in counts):
        counts = []
    client.log_batch(parent, metrics=counts, tags=tags)
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "verdicts.csv"
        d.table().to_csv(table, index=False)
        client.log_artifact(parent, str(table), artifact_path="attribution")
    for path in (rep.html_path, rep.markdown_path):
        if path is not None:
            client.log_artifact(parent, str(path), artifact_path="attribution")
    if sweep.record.confirms:
        refresh_screening(sweep.record.confirms.get("study"), tracking_uri)


def refresh_screening(study, tracking_uri: str | None) -> bool:
    """A confirmation's verdict on its screening study's parent run too: the screening's
    description rebuilt with its confirmations' lines (`analysis.links`), at its last recorded
    look (nothing new is tested or recorded: where its runs are not the data of a recorded
    look, it is left as it is). Returns whether it was written. A screening that cannot be
    read is left alone: one damaged study never blocks another's report."""
    if not isinstance(study, str) or not study:
        return False
    try:
        screening = load_runs(study, tracking_uri)
        rep = build_report(screening, None, links=links.confirmation_lines(links.in_store(tracking_uri, study)))
    except (AnalysisError, ValueError, KeyError, OSError):
        return False
    if rep.look is None or rep.look.new or rep.look.what_if:
        return False
    client = tracking_client(tracking_uri)
    client.set_tag(screening.record.parent_run_id, NOTE_TAG, parent_note(rep, screening))
    return True
