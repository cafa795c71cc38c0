"""MLflow runs of a sweep -> one pandas row per finished trial.

Columns: `run_id`, `run_name`, `cell`, `replicate`, `seed`, `arm`, one ordered categorical
per factor (from the `factor.<name>` tags, levels in the spec's order), every trainer
config field under its own name (MLflow params are strings; they are typed here, once),
every final metric under the trainer's name (`val/acc@3`: the store holds
`val/acc:3`, since MLflow refuses '@'), and a finished run's evaluation items (its
`items.json`, `trials.store.items`) as their columns. Runs that failed, were killed or never finished
are not dropped silently: the frame's `incomplete_runs()` lists them, and reports name them.
The table travels in a `SweepFrame` (`trials.export`) with the factors and the sweep's
record from its parent run (`trials.sweep_record.from_parent`).

`read_parquet` reads the engine's export (`trials.export`) with the sequential plan checked
too. What the analysis writes
back to the store (a look, a report's verdicts) is `analysis.publish`.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pandas as pd

from trials.store.client import check_store, tracking_client
from trials.store.keys import ERROR_TAG, StoreReadError, sweep_parent, sweep_trials
from trials.store.items import JACK_PREFIX
from trials.store.reader import reading_client, run_items
import trials.export as export
from trials.export import META_COLUMNS, SweepFrame, finished_frame, run_row
from trials.sweep_record import SweepRecord, factor_levels, from_parent

from .sequential import plan_of
from .item_kinds import count_column


def load_runs(experiment: str, tracking_uri: str | None = None) -> SweepFrame:
    """One row per FINISHED child run of `experiment` (the frame's `runs`), the others in its
    `incomplete`, the parent run's record in its `record`."""
    check_store(tracking_uri)
    client = reading_client(tracking_uri) if tracking_uri else tracking_client(None)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"experiment {experiment!r} does not exist in {tracking_uri or 'the default store'}")
    parent = sweep_parent(client, exp.experiment_id)
    df = pd.DataFrame([_row(r, client) for r in sweep_trials(client, exp.experiment_id)])
    if df.empty:
        return SweepFrame(pd.DataFrame(columns=list(META_COLUMNS)), record=SweepRecord(experiment=experiment))
    sweep = finished_frame(df, factor_levels(parent.data.params) if parent is not None else {})
    if parent is None:
        return replace(sweep, record=SweepRecord(experiment=experiment, experiment_id=exp.experiment_id))
    try:  # the parent's tags are input too: checked as a parquet export's metadata is
        record = from_parent(parent.data.tags, parent.data.params,
                             (experiment, exp.experiment_id, parent.info.run_id), sweep.factors, sweep.runs.columns)
        check_plan(record.sequential, record.declared_plan)
    except ValueError as e:
        raise ValueError(f"{tracking_uri or 'the default store'}: sweep {experiment!r}, parent run "
                         f"{parent.info.run_id}: {e}") from None
    sweep = replace(sweep, record=declared_when_missing(record))
    if (why := item_count_problem(sweep)):
        raise StoreReadError(f"{tracking_uri or 'the default store'}: sweep {experiment!r}: {why}")
    return sweep


def _row(r, client) -> dict:
    """A run as a row; a finished run's items (its `items.json`, or, recorded before it, its
    `jack/` and `split/` metrics) as their columns."""
    for k, v in r.data.metrics.items():  # SQLite keeps whatever a hand edit wrote in a float column
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise StoreReadError(f"run {r.info.run_id}: metric {k!r} holds {str(v)[:40]!r}, not a number")
    row = run_row(r.info.run_id, r.info.run_name, r.info.status, r.data.tags, r.data.params, r.data.metrics)
    if r.info.status == "FINISHED":
        row.update(run_items(client, r))
    if r.info.status != "FINISHED" and r.data.tags.get(ERROR_TAG):  # why it failed: its error's last line
        row["error"] = [line for line in r.data.tags[ERROR_TAG].splitlines() if line.strip()][-1][:300]
    if r.info.end_time and r.info.start_time:  # the trial's wall time, which plans price blocks with
        row["run_s"] = (r.info.end_time - r.info.start_time) / 1000.0
    return row


def report_incomplete(sweep: SweepFrame) -> str:
    inc = sweep.incomplete_runs()
    if len(inc) == 0:
        return ""
    counts = inc["status"].value_counts().to_dict()
    why = inc["error"] if "error" in inc.columns else pd.Series("", index=inc.index)
    return (f"{len(inc)} run(s) not analysed: " + ", ".join(f"{n} {s}" for s, n in counts.items())
            + " (" + "; ".join(f"{r.cell} r{r.replicate}: {r.status}" + (f" ({w})" if w and w != "nan" else "")
                               for r, w in zip(inc.itertuples(), why)) + ")")


def responses(df: pd.DataFrame) -> list[str]:
    """Metric columns (the trainer's `a/b` names) that hold finite numbers."""
    out = []
    for c in df.columns:
        if "/" in c and pd.api.types.is_numeric_dtype(df[c]):
            vals = df[c].dropna()
            if len(vals) and bool((vals.astype(float).abs() < math.inf).all()):  # vectorised: 3,200 runs x 100 metrics
                out.append(c)
    return out


def declared_when_missing(record: SweepRecord) -> SweepRecord:
    """The record with its declared plan as its sequential record where that is missing (no
    look yet, or removed): a sweep declared sequential is never read as a fixed-sample one."""
    if record.declared_plan and not record.sequential:
        return replace(record, sequential=record.declared_plan)
    return record


def check_plan(sequential: str, declared: str) -> None:
    """The sequential record as the statistics read it (`analysis.sequential.plan_of`: its
    looks spent as its rule spends), and its plan the one declared when the sweep was made
    (the parent's write-once param; absent for sweeps made before it): ValueError in one line."""
    if not sequential:
        return
    plan = plan_of(sequential)
    if declared and (how := plan.departs_from(plan_of(declared))):
        raise ValueError(f"the sequential record is not the plan declared when the sweep was made ({how}): "
                         "its looks are not used")


def item_count_problem(sweep: SweepFrame) -> str:
    """Why a run's items cannot be its evaluation's (one line naming the run), or "": each
    response's item count (`jack/<response>@n`) against the evaluation count its registry row
    says its items are drawn on (`Registry.item_count`). Items over
    another count are another evaluation's, or damaged; a run without either count is not
    checked (recorded before counts were)."""
    df = sweep.runs
    counted = [c for c in df.columns if c.startswith(JACK_PREFIX) and c.endswith("@n")]
    if not counted:
        return ""
    rules = sweep.registry
    for column in counted:
        response = column[len(JACK_PREFIX):-len("@n")]
        declared = count_column(response, rules)
        if not declared or declared not in df.columns:
            continue
        n, m = pd.to_numeric(df[column], errors="coerce"), pd.to_numeric(df[declared], errors="coerce")
        bad = n.notna() & m.notna() & (n != m)
        if bad.any():
            i = bad.to_numpy().nonzero()[0][0]
            row = df.iloc[i]
            return (f"run {row.get('run_id', i)} ({row.get('cell', '?')} r{row.get('replicate', '?')}): its items of "
                    f"{response!r} are over {n.iloc[i]:g} items, but its evaluation counted {m.iloc[i]:g} ({declared}): "
                    "not that evaluation's items; not read")
    return ""


def read_parquet(path: str | Path) -> SweepFrame:
    """A parquet export back as the analysis frame (`trials.export.read_parquet`: every field
    of its record and its numbers checked), its sequential plan checked too: a crafted or
    damaged file is refused in one line naming the file and what is wrong."""
    sweep = export.read_parquet(path)
    sweep = replace(sweep, record=declared_when_missing(sweep.record))
    if (why := item_count_problem(sweep)):
        raise ValueError(f"parquet: {path}: {why}")
    if sweep.record.sequential:
        try:
            check_plan(sweep.record.sequential, sweep.record.declared_plan)
        except ValueError as e:
            raise ValueError(f"parquet: {path}: its dspark.attrs metadata: {e}") from None
    return sweep
