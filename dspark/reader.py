"""A read-only view of an MLflow store for the reading commands (`trials status`, `trials
list`, `analysis plan`, the report's loader), which answers without importing MLflow:
importing MLflow takes about 2.5 s here, longer than such a command may take.

`reading_client(uri)` returns an object with the few reading methods of MLflow's
`MlflowClient` that the project calls (`get_experiment_by_name`, `search_experiments`,
`search_runs` with a `tags.<key> = '<v>'` or `tags.<key> != '<v>'` filter), returning
entities with the same fields (`run.info.status`, `run.data.metrics`, `experiment.tags`):

- an HTTP(S) tracking server: MLflow's REST API (`/api/2.0/mlflow/...`), the interface
  every non-Python MLflow client reads, with MLflow's own basic or token credentials;
- a SQLite store: MLflow's tables, read in SQLite's read-only mode exactly as MLflow's
  SQL store reads them (latest metrics, NaN flags, active runs only, its default order);
- anything else (PostgreSQL, MySQL, a file store, credentials this reader does not speak,
  or a SQLite schema without the columns read here): MLflow's own client.

Every write goes through MLflow's client. `tests/dspark/test_reader.py` checks that both
readers give what MLflow's client gives on the same store.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from .record import SQLITE, tracking_client

# MLflow client settings this reader does not implement: where one is set, MLflow reads
FALLBACK_ENV = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH",
                "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_AWS_SIGV4")
FILTER_RE = re.compile(r"^tags\.`?([\w./:-]+)`?\s*(=|!=)\s*'([^']*)'$")
# the columns read here, per table: a store without one of them is read by MLflow itself
SCHEMA = {"experiments": {"experiment_id", "name", "lifecycle_stage", "creation_time"},
          "experiment_tags": {"key", "value", "experiment_id"},
          "runs": {"run_uuid", "name", "status", "start_time", "end_time", "lifecycle_stage", "experiment_id"},
          "tags": {"key", "value", "run_uuid"}, "params": {"key", "value", "run_uuid"},
          "latest_metrics": {"key", "value", "is_nan", "run_uuid"}}


class StoreReadError(ConnectionError):
    """The store did not answer a read, or refused it (the CLIs answer it in one line)."""


@dataclass(frozen=True)
class Experiment:
    experiment_id: str
    name: str
    lifecycle_stage: str = "active"
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    run_name: str
    status: str
    start_time: int | None
    end_time: int | None
    experiment_id: str = ""


@dataclass(frozen=True)
class RunData:
    tags: dict[str, str]
    params: dict[str, str]
    metrics: dict[str, float]


@dataclass(frozen=True)
class Run:
    info: RunInfo
    data: RunData


class Page(list):
    """A page of results, with MLflow's `token` for the next one (None on the last)."""

    def __init__(self, items, token: str | None = None):
        super().__init__(items)
        self.token = token


def parse_filter(text: str) -> tuple[str, str, str]:
    """`tags.<key> = '<v>'` or `tags.<key> != '<v>'` -> (key, op, value); the only filters
    the project searches runs with."""
    m = FILTER_RE.match(text.strip())
    if m is None:
        raise ValueError(f"reader: unsupported run filter {text!r}")
    return m.group(1), m.group(2), m.group(3)


def reading_client(uri: str):
    """The fastest faithful reader of `uri`'s store (see the module docstring)."""
    if uri.startswith(("http://", "https://")) and not any(os.environ.get(k) for k in FALLBACK_ENV):
        return RestReader(uri)
    if uri.startswith(SQLITE):
        path = Path(uri[len(SQLITE):])
        if path.is_file() and SqliteReader.readable(path):
            return SqliteReader(path)
    return tracking_client(uri)


class RestReader:
    """MLflow's REST API, read with the standard library."""

    def __init__(self, uri: str):
        self.base = uri.rstrip("/") + "/api/2.0/mlflow/"
        self.timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "30"))
        self.headers = {"Content-Type": "application/json"}
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if user and password:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"

    def _call(self, endpoint: str, body: dict | None = None, query: dict | None = None) -> dict | None:
        """One request; None for MLflow's RESOURCE_DOES_NOT_EXIST, StoreReadError otherwise."""
        url = self.base + endpoint + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=self.headers, method="POST" if data else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            if e.code == 404 and "RESOURCE_DOES_NOT_EXIST" in detail:
                return None
            raise StoreReadError(f"HTTP {e.code} from {url}: {detail[:200]}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise StoreReadError(f"{url}: {reason}") from None

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._call("experiments/get-by-name", query={"experiment_name": name})
        return _rest_experiment(found["experiment"]) if found else None

    def search_experiments(self, max_results: int = 1000, page_token: str | None = None) -> Page:
        body = {"max_results": max_results, "view_type": "ACTIVE_ONLY", **({"page_token": page_token} if page_token
                                                                            else {})}
        found = self._call("experiments/search", body) or {}
        return Page([_rest_experiment(e) for e in found.get("experiments", [])], found.get("next_page_token"))

    def search_runs(self, experiment_ids: list[str], filter_string: str = "", max_results: int = 1000,
                    page_token: str | None = None) -> Page:
        parse_filter(filter_string)  # the same filters as the SQLite reader, refused alike
        body = {"experiment_ids": list(experiment_ids), "filter": filter_string, "max_results": max_results,
                "run_view_type": "ACTIVE_ONLY", **({"page_token": page_token} if page_token else {})}
        found = self._call("runs/search", body) or {}
        return Page([_rest_run(r) for r in found.get("runs", [])], found.get("next_page_token"))


def _pairs(items) -> dict[str, str]:
    return {i["key"]: i.get("value", "") for i in items or []}


def _rest_experiment(e: dict) -> Experiment:
    return Experiment(str(e["experiment_id"]), e["name"], e.get("lifecycle_stage", "active"), _pairs(e.get("tags")))


def _rest_run(r: dict) -> Run:
    info, data = r["info"], r.get("data", {})
    tags = _pairs(data.get("tags"))
    end = info.get("end_time")
    return Run(RunInfo(info.get("run_id") or info["run_uuid"], info.get("run_name") or tags.get("mlflow.runName", ""),
                       info["status"], int(info["start_time"]) if info.get("start_time") is not None else None,
                       int(end) if end is not None else None, str(info.get("experiment_id", ""))),
               RunData(tags, _pairs(data.get("params")),
                       {m["key"]: float(m.get("value", 0.0)) for m in data.get("metrics") or []}))


class SqliteReader:
    """MLflow's SQLite tables, opened read-only (no file is created, no schema migrated)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @staticmethod
    def readable(path: Path) -> bool:
        """Whether the store has every table and column read here (else MLflow reads it)."""
        try:
            with closing(_connect(path)) as db:
                for table, cols in SCHEMA.items():
                    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    if not cols <= have:
                        return False
        except sqlite3.Error:
            return False
        return True

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            with closing(_connect(self.path)) as db:
                return db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreReadError(f"{self.path}: {e}") from None

    def _experiments(self, where: str, args: tuple, limit: int = -1) -> list[Experiment]:
        rows = self._rows("SELECT experiment_id, name, lifecycle_stage FROM experiments WHERE " + where
                          + " ORDER BY creation_time DESC, experiment_id ASC LIMIT ?", (*args, limit))
        tags: dict[str, dict[str, str]] = {str(r[0]): {} for r in rows}
        if rows:
            marks = ",".join("?" * len(rows))
            for eid, k, v in self._rows(f"SELECT experiment_id, key, value FROM experiment_tags WHERE experiment_id "
                                        f"IN ({marks})", tuple(r[0] for r in rows)):
                tags[str(eid)][k] = v
        return [Experiment(str(eid), name, stage, tags[str(eid)]) for eid, name, stage in rows]

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._experiments("name = ?", (name,))
        return found[0] if found else None

    def search_experiments(self, max_results: int = 1000, page_token: str | None = None) -> Page:
        if page_token:
            raise ValueError("reader: SQLite experiments are read in one page")
        return Page(self._experiments("lifecycle_stage = 'active'", (), max_results))

    def search_runs(self, experiment_ids: list[str], filter_string: str = "", max_results: int = 1000,
                    page_token: str | None = None) -> Page:
        """Active runs whose tag matches, in MLflow's default order (newest start first, then
        run id); `page_token` is the offset of the next page."""
        key, op, value = parse_filter(filter_string)
        offset = int(page_token or 0)
        marks = ",".join("?" * len(experiment_ids))
        rows = self._rows(
            f"SELECT r.run_uuid, r.name, r.status, r.start_time, r.end_time, r.experiment_id FROM runs r "
            f"JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? AND t.value {op} ? "
            f"WHERE r.experiment_id IN ({marks}) AND r.lifecycle_stage = 'active' "
            f"ORDER BY r.start_time DESC, r.run_uuid ASC LIMIT ? OFFSET ?",
            (key, value, *[int(e) for e in experiment_ids], max_results + 1, offset))
        more = len(rows) > max_results
        rows = rows[:max_results]
        runs = self._run_data([r[0] for r in rows])
        page = [Run(RunInfo(r[0], r[1] or runs[r[0]].tags.get("mlflow.runName", ""), r[2], r[3], r[4], str(r[5])),
                    runs[r[0]]) for r in rows]
        return Page(page, str(offset + max_results) if more else None)

    def _run_data(self, ids: list[str]) -> dict[str, RunData]:
        out = {i: RunData({}, {}, {}) for i in ids}
        for start in range(0, len(ids), 500):  # SQLite's bound on a statement's parameters
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for rid, k, v in self._rows(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({marks})", chunk):
                out[rid].tags[k] = v
            for rid, k, v in self._rows(f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN ({marks})", chunk):
                out[rid].params[k] = v
            for rid, k, v, nan in self._rows(f"SELECT run_uuid, key, value, is_nan FROM latest_metrics "
                                             f"WHERE run_uuid IN ({marks})", chunk):
                out[rid].metrics[k] = float("nan") if nan else float(v)
        return out


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only: SQLite's `mode=ro` never creates the file nor writes it; a writer's lock
    is waited on for up to 30 s, as MLflow's own SQLite engine does."""
    return sqlite3.connect(f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro", uri=True, timeout=30)
