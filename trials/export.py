"""A sweep as the engine hands it to the statistics: its finished runs as one table with its
record beside them (`SweepFrame`; the record and its codecs are `trials.sweep_record`), and
the parquet export that carries both without a store (`to_parquet`, `read_parquet`), every
field checked as it is read.
The engine writes it (`trials run --local`, `analysis export` through `analysis.sweep_reader`); the
statistics read it. The MLflow reader is `analysis.sweep_reader.load_runs`.

Not pandas `DataFrame.attrs`: pandas deep-copies attrs at every operation (in the verdicts'
refit loops that cost more than the fits), keeps them through some operations and not
others, and nothing says which keys a frame carries; a field is typed and always there.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import pandas as pd

from trials.registry import Registry, recorded
from trials.store.keys import (ARM_TAG, CELL_TAG, FACTOR_PREFIX, REPLICATE_TAG, RUN_ORDER_TAG, SEED_TAG,
                               metric_name)
from trials.store.items import is_item_column
from trials.sweep_record import SweepRecord, from_metadata, to_metadata

# a run's identity and outcome: the columns of an incomplete run's record
META_COLUMNS = ("run_id", "run_name", "status", "cell", "replicate", "seed", "arm", "run_order", "error")


@dataclass(frozen=True, eq=False)  # eq=False: a DataFrame has no truth value to compare by
class SweepFrame:
    """One sweep's finished runs (`runs`: one row per run, a column per factor, config field
    and metric) and what the analysis needs beside them."""
    runs: pd.DataFrame
    factors: list[str] = field(default_factory=list)  # the factor columns, in the spec's order
    record: SweepRecord = field(default_factory=SweepRecord)
    incomplete: list[dict] = field(default_factory=list)  # the failed, killed, unfinished runs (META_COLUMNS)
    local_rows: list[dict] = field(default_factory=list)  # `trials run --local`'s rows: what a rerun resumes from

    @cached_property  # read per response and per look: the rows are read once (a record is frozen)
    def registry(self) -> Registry:
        """The rules over the swept workload's metrics (better direction, degenerate, timed):
        the record's own copy where it keeps one (no workload imported, unless it was kept before
        its rows declared what the statistics read), else the installed or allowed workload's
        (`trials.workload.load_workload`)."""
        return self.record.rules()

    def with_runs(self, runs: pd.DataFrame) -> SweepFrame:
        """The same sweep over other rows (a subset, or columns changed): the rest kept."""
        return replace(self, runs=runs)

    def incomplete_runs(self) -> pd.DataFrame:
        """The runs left out of `runs`, one row each (META_COLUMNS, as text)."""
        return pd.DataFrame(self.incomplete, columns=list(META_COLUMNS))

    def metadata(self) -> dict:
        """Everything but the table, as plain JSON data: what a parquet export keeps beside
        it (`to_parquet`), in the keys exports have always used."""
        return {"factors": list(self.factors), **to_metadata(self.record), "local_rows": list(self.local_rows),
                "incomplete": list(self.incomplete)}

    @classmethod
    def from_metadata(cls, runs: pd.DataFrame, given: Mapping) -> SweepFrame:
        """`metadata`'s inverse: the table and what an export kept beside it, checked
        (`trials.sweep_record.from_metadata`, then the run records): ValueError naming the
        first field that is wrong."""
        record = from_metadata(given, runs.columns)
        _check_records(given.get(INCOMPLETE_KEY) or [], INCOMPLETE_KEY, set(META_COLUMNS), ())
        _check_records(given.get("local_rows") or [], "local_rows", None, ("tags", "params", "metrics"))
        return cls(runs, factors=list(given.get("factors") or []), record=record,
                   incomplete=list(given.get("incomplete") or []), local_rows=list(given.get("local_rows") or []))


INCOMPLETE_KEY = "incomplete"


PARQUET_KEY = b"dspark.attrs"  # the exports' metadata key, named when the record rode in pandas attrs


def _typed(value: str):
    """An MLflow param string back to a number / tuple / string."""
    if value in ("True", "False"):
        return value == "True"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    if value[:1] in "[(":
        try:
            return str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            return value
    return value


def finished_frame(df: pd.DataFrame, order: dict[str, list[str]]) -> SweepFrame:
    """Rows of runs (tags, params as strings, metrics) -> the analysis frame: the FINISHED
    runs with typed columns, the others kept as its `incomplete` records; its record is
    the caller's to fill. The MLflow reader and the Ray-free local runner (`trials run
    --local`) build their frames here alike."""
    done = df["status"] == "FINISHED"
    inc = df.loc[~done, [c for c in META_COLUMNS if c in df.columns]].fillna("").astype(str).to_dict(orient="records")
    df = df.loc[done].drop(columns=["error"], errors="ignore").reset_index(drop=True)
    df, factors = type_columns(df, order)
    for col in df.columns:  # a knob whose values mix types (decay_gamma: 4.0 | "block") stays text
        if df[col].dtype == object and df[col].map(type).nunique() > 1:
            df[col] = df[col].astype(str)
    return SweepFrame(df, factors=factors, incomplete=inc)


def run_row(run_id: str, run_name: str, status: str, tags: dict[str, str], params: dict[str, str],
            metrics: dict[str, float]) -> dict:
    """One run as a row: the sweep's tags, the typed params and the metrics under the trainer's names."""
    row = {"run_id": run_id, "run_name": run_name, "status": status,
           "cell": tags.get(CELL_TAG, ""), "replicate": int(tags.get(REPLICATE_TAG, 0)),
           "seed": int(tags.get(SEED_TAG, 0)), "arm": tags.get(ARM_TAG, "factorial"),
           "run_order": int(tags.get(RUN_ORDER_TAG, -1))}
    for k, v in tags.items():
        if k.startswith(FACTOR_PREFIX):
            row[k] = v
    for k, v in params.items():
        row[k] = _typed(v)
    for k, v in metrics.items():
        row[metric_name(k)] = v
    return row


def type_columns(df: pd.DataFrame, order: dict[str, list[str]] | None = None) -> tuple[pd.DataFrame, list[str]]:
    """`factor.X` tag columns -> ordered categorical column X (empty = not in the factorial);
    returns the frame and the factors' names."""
    order = order or {}
    factors = []
    for col in [c for c in df.columns if c.startswith(FACTOR_PREFIX)]:
        name = col[len(FACTOR_PREFIX):]
        values = df[col].replace("", pd.NA)
        seen = [v for v in order.get(name, []) if v in set(values.dropna())]
        seen += sorted(set(values.dropna()) - set(seen))
        df[name] = pd.Categorical(values, categories=seen, ordered=True)
        df = df.drop(columns=[col])
        factors.append(name)
    return df, factors


def to_parquet(sweep: SweepFrame, path: str | Path) -> None:
    """The runs, factor order kept (pyarrow), with the rest of the frame as the file's
    metadata (`SweepFrame.metadata`, as JSON under PARQUET_KEY)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not sweep.record.registry:  # the registry travels with the export: a reader imports no workload
        kept = recorded(sweep.registry, [c for c in sweep.runs.columns if isinstance(c, str)])
        sweep = replace(sweep, record=replace(sweep.record, registry=kept))
    table = pa.Table.from_pandas(sweep.runs, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[PARQUET_KEY] = json.dumps(sweep.metadata()).encode()
    # whole or not at all: a full disk leaves any older export, never half of one
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table.replace_schema_metadata(meta), tmp)
        os.replace(tmp, path)
    except OSError as e:  # pyarrow's message names the temporary file, or none, and hides the errno in its text
        code = e.errno or int((re.search(r"\[errno (\d+)\]", str(e)) or [0, 0])[1]) or None
        raise OSError(code, os.strerror(code) if code else str(e), str(path)) from e
    finally:
        tmp.unlink(missing_ok=True)


def check_writable(path: str | Path) -> Path:
    """Refuse, before any work, a path whose folder is missing or not writable."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"export: {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise ValueError(f"export: folder {path.parent} does not exist")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ValueError(f"export: {path} is not writable")
    return path


def read_parquet(path: str | Path) -> SweepFrame:
    """A parquet export (`to_parquet`, `trials run --local`) back as the analysis frame. The
    export's metadata is input like a spec: each field is checked (`check_record`) and its
    numbers (`_numeric_columns`), so that a crafted or damaged file is refused in one line
    naming the file and what is wrong, before any analysis."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise ValueError(f"parquet: {path} is not a file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"parquet: {path} is not a parquet export ({type(e).__name__})") from None
    try:
        given = json.loads((table.schema.metadata or {}).get(PARQUET_KEY, b"{}"))
    except ValueError:
        raise ValueError(f"parquet: {path}: its dspark.attrs metadata is not JSON") from None
    except RecursionError:
        raise ValueError(f"parquet: {path}: its dspark.attrs metadata nests too deep to be an export's") from None
    if not isinstance(given, dict):
        raise ValueError(f"parquet: {path}: its dspark.attrs metadata is not an analysis export's (not an object)")
    df = _numeric_columns(_without_pandas_attrs(table).to_pandas(), path)
    try:
        return SweepFrame.from_metadata(df, given)
    except ValueError as e:
        raise ValueError(f"parquet: {path}: its dspark.attrs metadata: {e}") from None


def _without_pandas_attrs(table):
    """The table without the pandas attrs pyarrow stored with it: exports written while the
    record rode in attrs hold a second copy of it there, which `to_pandas` would restore and
    pandas would then deep-copy at every operation. The record is read from PARQUET_KEY."""
    meta = dict(table.schema.metadata or {})
    try:
        described = json.loads(meta.get(b"pandas", b"{}"))
    except (ValueError, RecursionError):
        return table  # not ours to judge: pyarrow reads it, or says what is wrong, as before
    if not isinstance(described, dict) or "attributes" not in described:
        return table
    del described["attributes"]
    meta[b"pandas"] = json.dumps(described).encode()
    return table.replace_schema_metadata(meta)


def _short(value) -> str:
    return repr(value)[:60]


def _check_records(records, key: str, allowed: set | None, mappings: tuple[str, ...]) -> None:
    """A list of run records: objects (with only `allowed` keys, if given) whose values are
    plain numbers or text, or (for the `mappings` keys) objects."""
    if not isinstance(records, list):
        raise ValueError(f"{key}: a list of run records, got {_short(records)}")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise ValueError(f"{key}[{i}]: a run record (an object), got {_short(rec)}")
        unknown = sorted(set(rec) - allowed) if allowed is not None else []
        if unknown:
            raise ValueError(f"{key}[{i}]: unknown field(s) {', '.join(map(str, unknown))[:80]} "
                             f"(allowed: {', '.join(sorted(allowed))})")
        for k, v in rec.items():
            ok = isinstance(v, dict) if k in mappings else (v is None or isinstance(v, (str, int, float)))
            if not ok:
                raise ValueError(f"{key}[{i}].{k}: {'an object' if k in mappings else 'a number or text'}, "
                                 f"got {_short(v)}")


NUMERIC_COLUMNS = ("replicate", "run_order", "seed", "run_s")


INTEGER_COLUMNS = ("replicate", "run_order", "seed")  # a run's block, launch position and seed: whole numbers


def _numeric_columns(df: pd.DataFrame, path) -> pd.DataFrame:
    """Metric columns (`a/b`) and the run numbers as numbers: a column of numeric strings (a
    parquet written by another tool) is converted; any other value is refused, named, as is
    a run number that is missing or not whole (the design's blocks are built from them)."""
    for c in df.columns:
        if not isinstance(c, str) or not (("/" in c) or c in NUMERIC_COLUMNS) or pd.api.types.is_numeric_dtype(df[c]):
            continue
        values = df[c].replace("", None)
        converted = pd.to_numeric(values, errors="coerce")
        bad = values[converted.isna() & values.notna()]
        if len(bad):
            raise ValueError(f"parquet: {path}: column {c!r} holds {len(bad)} non-numeric value(s), "
                             f"e.g. {str(bad.iloc[0])[:40]!r}")
        df[c] = converted.astype(float)
    for c in [c for c in INTEGER_COLUMNS if c in df.columns]:
        values = pd.to_numeric(df[c], errors="coerce").astype(float)
        bad = ~(values.map(math.isfinite) & (values == values.round()))
        if bad.any():
            i = bad.to_numpy().nonzero()[0][0]
            run = f" (run {df['run_name'].iloc[i]})" if "run_name" in df.columns else ""
            raise ValueError(f"parquet: {path}: column {c!r} holds {int(bad.sum())} value(s) that are not whole "
                             f"numbers, e.g. {float(values.iloc[i])!r} in row {i}{run}")
        df[c] = values.astype(int)
    for c in [c for c in df.columns if isinstance(c, str) and is_item_column(c)]:
        values = pd.to_numeric(df[c], errors="coerce").astype(float)
        bad = values.map(math.isinf)  # an item left undefined is NaN; an infinite one is damage
        if bad.any():
            i = bad.to_numpy().nonzero()[0][0]
            run = f" (run {df['run_name'].iloc[i]})" if "run_name" in df.columns else ""
            raise ValueError(f"parquet: {path}: item column {c!r} holds {int(bad.sum())} infinite value(s), e.g. in "
                             f"row {i}{run}")
    return df
