"""A read-only view of an MLflow store for the reading commands (`trials status`, `trials
list`, `analysis plan`, the report's loader), which answers without importing MLflow:
importing MLflow takes about 2.3 s here, longer than such a command may take.

`reading_client(uri)` returns an object with the few reading methods of MLflow's
`MlflowClient` that the project calls (`get_experiment_by_name`, `search_experiments`,
`search_runs` with a `tags.<key> = '<v>'` or `tags.<key> != '<v>'` filter), returning
entities with the same fields (`run.info.status`, `run.data.metrics`, `experiment.tags`):

- an HTTP(S) tracking server: MLflow's REST API (`/api/2.0/mlflow/...`), the interface
  every non-Python MLflow client reads, with MLflow's own basic or token credentials,
  `requests`' certificate bundle, and MLflow's retries of a busy server;
- a SQLite store: MLflow's tables, read in SQLite's read-only mode exactly as MLflow's
  SQL store reads them (latest metrics, NaN flags, active runs only, its default order);
  a SQLite file without MLflow's tables is refused (MLflow's client would create them);
- anything else: MLflow's own client. That is PostgreSQL or MySQL; MLflow workspaces; a
  setting only MLflow's client or `requests` speaks (TLS options, auth plugins, a netrc,
  credentials in the URI, ALL_PROXY, a CIDR range in NO_PROXY); a SQLite URI with escapes
  or options.

A SQLite store whose MLflow tables lack a column read here (dropped or renamed by hand, or
by a tool) is refused in one line naming the table and the column: MLflow's own client maps
the same columns and failed there after logging a page of SQL tracebacks. A value in it
that MLflow's schema does not allow (text in `latest_metrics.value`) is refused naming the
run and the metric.

Every write goes through MLflow's client. `tests/dspark/test_reader.py` checks that both
readers give what MLflow's client gives on the same store, and every failure is one line.
"""

from __future__ import annotations

import base64
import functools
import http.client
import json
import os
import re
import sqlite3
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from .record import SQLITE, sqlite_init_lock, sqlite_path, tracking_client

# settings that MLflow's client (or the `requests` library under it) honours and this reader
# does not: where one is set, MLflow's client reads. Workspaces scope every read.
WORKSPACE_ENV = ("MLFLOW_WORKSPACE", "MLFLOW_ENABLE_WORKSPACES")
HTTP_FALLBACK_ENV = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH",
                     "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_AWS_SIGV4",
                     "NETRC", "ALL_PROXY", "all_proxy")
CA_BUNDLE_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")  # requests' certificate authorities, honoured here too
RETRY_CODES = (408, 429, 500, 502, 503, 504)  # what MLflow's client retries
LOCK_WAIT_S = 30.0  # how long a read waits for a SQLite store another process has locked
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
    run_name: str | None
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
    if any(os.environ.get(k) for k in WORKSPACE_ENV):
        return tracking_client(uri)
    if uri.startswith(("http://", "https://")) and _plain_http(uri):
        return RestReader(uri)
    if uri.startswith(SQLITE) and not any(ch in uri for ch in "?%"):  # a query or escapes: SQLAlchemy's to read
        path = sqlite_path(uri)
        # under the lock MLflow's first use is taken under (record.tracking_client): a store
        # another process is creating right now has some of its tables, not yet all columns
        with sqlite_init_lock(path):
            if path.is_file() and SqliteReader.readable(path):
                return SqliteReader(path)
    return tracking_client(uri)


def _plain_http(uri: str) -> bool:
    """No setting that only MLflow's client speaks: TLS, auth plugins, proxies, a netrc,
    credentials in the URI."""
    if any(os.environ.get(k) for k in HTTP_FALLBACK_ENV) or "@" in urllib.parse.urlsplit(uri).netloc:
        return False
    if "/" in os.environ.get("no_proxy", "") + os.environ.get("NO_PROXY", ""):
        return False  # a CIDR range, which requests honours and urllib does not
    return not (Path.home() / ".netrc").is_file()


class RestReader:
    """MLflow's REST API, read with the standard library."""

    def __init__(self, uri: str):
        self.base = uri.rstrip("/") + "/api/2.0/mlflow/"
        self.timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "30"))
        self.headers = {"Content-Type": "application/json"}
        bundle = next((os.environ[k] for k in CA_BUNDLE_ENV if os.environ.get(k)), None)
        self.tls = None
        if bundle and uri.startswith("https://"):
            self.tls = ssl.create_default_context(**({"capath": bundle} if os.path.isdir(bundle) else {"cafile": bundle}))
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if user and password:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {token}"
        elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
            self.headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"

    def _call(self, endpoint: str, body: dict | None = None, query: dict | None = None) -> dict | None:
        """One request, retried as MLflow's client retries (a few times on 429 and 5xx, with a
        doubling wait) and following a 307/308 redirect; None for MLflow's
        RESOURCE_DOES_NOT_EXIST; StoreReadError, in one line, otherwise."""
        url = self.base + endpoint + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        retries = int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3"))
        wait = float(os.environ.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"))
        for attempt in range(retries + 1):
            try:
                return self._once(url, data)
            except urllib.error.HTTPError as e:
                detail = _one_line(e.read().decode(errors="replace"))
                if e.code == 404 and "RESOURCE_DOES_NOT_EXIST" in detail:
                    return None
                if e.code in (307, 308) and e.headers.get("Location") and attempt < retries:
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    continue
                if e.code not in RETRY_CODES or attempt == retries:
                    raise StoreReadError(f"HTTP {e.code} from {url}: {_mlflow_message(detail)}") from None
            except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
                raise StoreReadError(f"{url}: {_one_line(str(getattr(e, 'reason', e)) or type(e).__name__)}") from None
            except ValueError:
                raise StoreReadError(f"{url}: the answer is not MLflow's JSON (is this an MLflow server?)") from None
            time.sleep(wait * 2 ** attempt)
        raise StoreReadError(f"{url}: no answer")  # pragma: no cover (the loop returns or raises)

    def _once(self, url: str, data: bytes | None) -> dict:
        request = urllib.request.Request(url, data=data, headers=self.headers, method="POST" if data else "GET")
        with urllib.request.urlopen(request, timeout=self.timeout, context=self.tls) as response:
            found = json.loads(response.read() or b"{}")
        if not isinstance(found, dict):
            raise ValueError("not an object")
        return found

    def get_experiment_by_name(self, name: str) -> Experiment | None:
        found = self._call("experiments/get-by-name", query={"experiment_name": name})
        return _shaped(lambda: _rest_experiment(found["experiment"]), "experiments/get-by-name") if found else None

    def search_experiments(self, max_results: int = 1000, page_token: str | None = None) -> Page:
        body = {"max_results": max_results, "view_type": "ACTIVE_ONLY", **({"page_token": page_token} if page_token
                                                                            else {})}
        found = self._call("experiments/search", body) or {}
        return _shaped(lambda: Page([_rest_experiment(e) for e in found.get("experiments", [])],
                                    found.get("next_page_token")), "experiments/search")

    def search_runs(self, experiment_ids: list[str], filter_string: str = "", max_results: int = 1000,
                    page_token: str | None = None) -> Page:
        parse_filter(filter_string)  # the same filters as the SQLite reader, refused alike
        body = {"experiment_ids": list(experiment_ids), "filter": filter_string, "max_results": max_results,
                "run_view_type": "ACTIVE_ONLY", **({"page_token": page_token} if page_token else {})}
        found = self._call("runs/search", body) or {}
        return _shaped(lambda: Page([_rest_run(r) for r in found.get("runs", [])], found.get("next_page_token")),
                       "runs/search")


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


def _mlflow_message(detail: str) -> str:
    """MLflow's own error message from a JSON error body; otherwise say what came back."""
    try:
        found = json.loads(detail)
        return _one_line(str(found.get("message") or found.get("error_code") or detail))
    except (ValueError, AttributeError):
        return "not MLflow's JSON error (is this an MLflow server, at this path?)" if "<" in detail else detail


def _pairs(items) -> dict[str, str]:
    return {i["key"]: i.get("value", "") for i in items or []}


def _shaped(build, endpoint: str):
    """Entities from an answer, or StoreReadError where it lacks MLflow's fields."""
    try:
        return build()
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise StoreReadError(f"{endpoint}: the answer lacks MLflow's fields ({type(e).__name__}: "
                             f"{_one_line(str(e), 80)}): is this an MLflow server?") from None


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


@functools.lru_cache(maxsize=1)
def mlflow_schema_head() -> str | None:
    """The newest migration of the installed MLflow's SQL schema, read from its migration
    files without importing MLflow (None where they cannot be read): a store at another is
    one whose creation or upgrade stopped part way."""
    import importlib.util

    found = importlib.util.find_spec("mlflow")
    if found is None or not found.submodule_search_locations:
        return None
    folder = Path(list(found.submodule_search_locations)[0]) / "store" / "db_migrations" / "versions"
    revisions, parents = set(), set()
    for f in folder.glob("*.py"):
        text = f.read_text(encoding="utf-8", errors="replace")
        rev = re.search(r'^revision\s*=\s*["\']([0-9a-f]+)["\']', text, re.M)
        down = re.search(r'^down_revision\s*=\s*["\']([0-9a-f]+)["\']', text, re.M)
        if rev:
            revisions.add(rev.group(1))
        if down:
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


class SqliteReader:
    """MLflow's SQLite tables, opened read-only (no file is created, no schema migrated)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @staticmethod
    def readable(path: Path) -> bool:
        """Whether this reader reads the store as MLflow would: no experiment outside MLflow's
        default workspace (MLflow scopes reads to a workspace). False sends the read to
        MLflow's client; a file that is not an MLflow store (MLflow would create its tables
        in it), one whose MLflow tables lack a column read here, or one locked past the wait
        is refused."""
        try:
            with closing(_connect(path)) as db:
                tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not {"experiments", "runs"} <= tables:
                    raise StoreReadError(f"{path}: no MLflow tables in this SQLite file (not an MLflow store)")
                for table, cols in SCHEMA.items():
                    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
                    if not have:
                        raise StoreReadError(f"{path}: MLflow's table {table} is missing (not MLflow's schema: "
                                             "altered by hand or by another tool?)")
                    if not cols <= have:
                        missing = ", ".join(sorted(cols - have))
                        at = (db.execute("SELECT version_num FROM alembic_version").fetchall()
                              if "alembic_version" in tables else [])
                        head = mlflow_schema_head()
                        if at and head and at[0][0] != head:  # MLflow's migrations stopped part way
                            raise StoreReadError(
                                f"{path}: MLflow's table {table} has no column(s) {missing}: the store's schema is at "
                                f"migration {at[0][0]}, not this MLflow's {head}: its creation or "
                                f"upgrade was interrupted (a full disk?); finish it with `mlflow db upgrade "
                                f"sqlite:///{path}`, or remove the file if it holds nothing yet")
                        raise StoreReadError(f"{path}: MLflow's table {table} has no column(s) {missing} (renamed or "
                                             "dropped by hand or by a tool: MLflow's client cannot read it either)")
                if "workspace" in {row[1] for row in db.execute("PRAGMA table_info(experiments)")}:
                    return not db.execute("SELECT 1 FROM experiments WHERE workspace != 'default' LIMIT 1").fetchall()
        except sqlite3.OperationalError as e:
            if "locked" in str(e):
                raise StoreReadError(f"{path}: {e} (another process held it for {LOCK_WAIT_S:g} s)") from None
            return False
        except sqlite3.DatabaseError as e:
            raise StoreReadError(f"{path}: {e}") from None
        return True

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            with closing(_connect(self.path)) as db:
                return db.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreReadError(f"{self.path}: {e}") from None

    def _experiments(self, where: str, args: tuple, limit: int = -1, offset: int = 0) -> list[Experiment]:
        rows = self._rows("SELECT experiment_id, name, lifecycle_stage FROM experiments WHERE " + where
                          + " ORDER BY creation_time DESC, experiment_id ASC LIMIT ? OFFSET ?", (*args, limit, offset))
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
        """Active experiments, newest first; `page_token` is the offset of the next page."""
        offset = int(page_token or 0)
        found = self._experiments("lifecycle_stage = 'active'", (), max_results + 1, offset)
        more = len(found) > max_results
        return Page(found[:max_results], str(offset + max_results) if more else None)

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
        # the name as MLflow gives it: the column, or where that is empty the mlflow.runName tag
        page = [Run(RunInfo(r[0], r[1] or runs[r[0]].tags.get("mlflow.runName") or r[1], r[2], r[3], r[4],
                            str(r[5])), runs[r[0]]) for r in rows]
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
                out[rid].metrics[k] = float("nan") if nan else self._number(v, rid, k)
        return out

    def _number(self, value, run_id: str, key: str) -> float:
        """A metric's stored value as MLflow's schema holds it (a number); one line naming
        the store, the run and the metric otherwise (SQLite keeps text in a REAL column)."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise StoreReadError(f"{self.path}: run {run_id}: metric {key!r} holds {str(value)[:40]!r}, not a number "
                             "(not a value MLflow writes)")


def _connect(path: Path) -> sqlite3.Connection:
    """Read-only: SQLite's `mode=ro` never creates the file nor writes it (a store in WAL
    mode, which MLflow does not set, gets SQLite's shared-memory files beside it); a
    writer's lock is waited on for up to LOCK_WAIT_S (a sweep's writes hold it for moments)."""
    return sqlite3.connect(f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro", uri=True,
                           timeout=LOCK_WAIT_S)
