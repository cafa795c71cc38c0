"""A sweep as the analysis holds it: `SweepFrame`, the table of its finished runs with what
a table cannot say itself (the factors, the sweep's record from its parent run, the runs
left out, the rows `trials run --local` resumes from). `analysis.load` builds one, from
the MLflow store or a parquet export, and writes it back; every function that needs more
than the table is handed the frame.

Not pandas `DataFrame.attrs`: pandas deep-copies attrs at every operation (in the verdicts'
refit loops that cost more than the fits), keeps them through some operations and not
others, and nothing says which keys a frame carries; a field is typed and always there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace

import pandas as pd

from trials.registry import Registry, from_record
from trials.workload import DEFAULT as DEFAULT_WORKLOAD
from trials.workload import load

# a run's identity and outcome: the columns of an incomplete run's record
META_COLUMNS = ("run_id", "run_name", "status", "cell", "replicate", "seed", "arm", "run_order", "error")


@dataclass(frozen=True)
class SweepRecord:
    """What a sweep's parent run says about it (or, for `trials run --local`, its spec)."""
    experiment: str = ""
    description: str = ""
    experiment_id: str = ""
    parent_run_id: str = ""
    design: str = ""  # full | 2^(k-p)
    responses: dict = field(default_factory=dict)  # the primary responses and their margins
    sequential: str = ""  # JSON of analysis.sequential.Plan: the declared plan and the looks so far
    timing: str = ""  # JSON: the last timing pass (the parent's `timing` tag), with its `busy` count
    primary_terms: list = field(default_factory=list)  # the spec's family terms ([]: every main effect and control)
    contrasts: dict = field(default_factory=dict)  # the spec's named contrasts: {name: {from: {f: level}, to: {...}}}
    workload: str = DEFAULT_WORKLOAD  # the trainer swept (`trials.workload`): its metric registry
    registry: dict = field(default_factory=dict)  # that registry as data (`trials.registry.recorded`), if kept
    confirms: dict = field(default_factory=dict)  # a confirmation's screening study and estimate (trials.spec)

    @classmethod
    def of(cls, given: Mapping) -> SweepRecord:
        """From a mapping (a parquet export's metadata, checked first by
        `analysis.load.check_record`); a field it lacks, or holds empty, keeps its default."""
        blank = cls()
        return cls(**{f.name: given.get(f.name) or getattr(blank, f.name) for f in fields(cls)})


@dataclass(frozen=True, eq=False)  # eq=False: a DataFrame has no truth value to compare by
class SweepFrame:
    """One sweep's finished runs (`runs`: one row per run, a column per factor, config field
    and metric) and what the analysis needs beside them."""
    runs: pd.DataFrame
    factors: list[str] = field(default_factory=list)  # the factor columns, in the spec's order
    record: SweepRecord = field(default_factory=SweepRecord)
    incomplete: list[dict] = field(default_factory=list)  # the failed, killed, unfinished runs (META_COLUMNS)
    local_rows: list[dict] = field(default_factory=list)  # `trials run --local`'s rows: what a rerun resumes from

    @property
    def registry(self) -> Registry:
        """The rules over the swept workload's metrics (better direction, degenerate, timed):
        the record's own copy where it keeps one (a parquet export: no workload imported),
        else the installed or allowed workload's (`trials.workload.load`)."""
        if self.record.registry:
            return from_record(self.record.registry)
        return load(self.record.workload).registry  # the one name lookup: installed or allowed only

    def with_runs(self, runs: pd.DataFrame) -> SweepFrame:
        """The same sweep over other rows (a subset, or columns changed): the rest kept."""
        return replace(self, runs=runs)

    def incomplete_runs(self) -> pd.DataFrame:
        """The runs left out of `runs`, one row each (META_COLUMNS, as text)."""
        return pd.DataFrame(self.incomplete, columns=list(META_COLUMNS))

    def metadata(self) -> dict:
        """Everything but the table, as plain JSON data: what a parquet export keeps beside
        it (`analysis.load.to_parquet`), in the keys exports have always used."""
        return {"factors": list(self.factors), **asdict(self.record), "local_rows": list(self.local_rows),
                "incomplete": list(self.incomplete)}

    @classmethod
    def from_metadata(cls, runs: pd.DataFrame, given: Mapping) -> SweepFrame:
        """`metadata`'s inverse: the table and what an export kept beside it."""
        return cls(runs, factors=list(given.get("factors") or []), record=SweepRecord.of(given),
                   incomplete=list(given.get("incomplete") or []), local_rows=list(given.get("local_rows") or []))


def busy_timing(record: SweepRecord) -> tuple[str, int] | None:
    """(the timed response, how many of its run-rounds the last timing pass found busy), where
    it found any (`trials.timing.busy_rounds`); None for none, no pass, or a pass before the check."""
    try:
        last = json.loads(record.timing) if record.timing else {}
    except ValueError:
        return None
    busy = last.get("busy") if isinstance(last, dict) else None
    if isinstance(busy, int) and not isinstance(busy, bool) and busy > 0 and isinstance(last.get("response"), str):
        return last["response"], busy
    return None
