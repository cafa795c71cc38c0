"""Reading an MLflow store for the commands that only read (`trials list` of a store, the
analysis' loader, `probe.py`'s check before any work), through MLflow's public interfaces
only: nothing here names MLflow's SQL tables.

`reading_client(uri)` returns an object with the reading methods of MLflow's `MlflowClient`
the project calls (`get_experiment_by_name`, `search_experiments`, `search_runs` with a
`tags.<key> = '<v>'` or `tags.<key> != '<v>'` filter), whose entities have the same fields
(`run.info.status`, `run.data.metrics`, `experiment.tags`):

- an HTTP(S) tracking server: MLflow's documented REST API (`/api/2.0/mlflow/...`) read with
  `requests` (its proxies, netrc and certificate bundles), with MLflow's basic or token
  credentials and MLflow's retries of a busy server: no MLflow import, which alone takes
  about 2.3 s here;
- anything else (SQLite, PostgreSQL, MySQL; MLflow workspaces; a setting only MLflow's
  client speaks: its TLS options, auth plugins): MLflow's own client (`client.tracking_client`).

`tests/trials/store/test_reader.py` checks that the REST reader gives what MLflow's client
gives on the same server, and that every failure is one line.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field

from .items import ITEMS_FILE, ITEMS_TAG, columns, document

from .client import tracking_client
from .keys import StoreReadError, store_key
from .kept import bounded_json

# settings that MLflow's client honours and this reader does not: where one is set, MLflow's
# client reads. Workspaces scope every read.
WORKSPACE_ENV = ("MLFLOW_WORKSPACE", "MLFLOW_ENABLE_WORKSPACES")
CLIENT_ONLY_ENV = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH",
                   "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_AWS_SIGV4")
RETRY_CODES = (408, 429, 500, 502, 503, 504)  # what MLflow's client retries
# a reading command's bounds on a server, each refused in one line naming it: the whole
# command's reads (a server that drips its answer a byte at a time), one answer's size, and
# the pages of one listing (a next_page_token that never ends)
READ_DEADLINE_S = float(os.environ.get("DSPARK_SWEEPS_READ_DEADLINE_S", "120"))
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_PAGES = 1000
CHUNK = 64 * 1024
FILTER_RE = re.compile(r"^tags\.`?([\w./:-]+)`?\s*(=|!=)\s*'([^']*)'$")


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
    if (uri.startswith(("http://", "https://")) and not any(os.environ.get(k) for k in WORKSPACE_ENV)
            and not any(os.environ.get(k) for k in CLIENT_ONLY_ENV)):
        return RestReader(uri)
    return tracking_client(uri)


class RestReader:
    """MLflow's REST API, read with `requests`."""

    def __init__(self, uri: str):
        import requests

        self.base = uri.rstrip("/") + "/api/2.0/mlflow/"
        self.uri = uri
        self.timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "30"))
        self.deadline = time.monotonic() + READ_DEADLINE_S
        self.session = requests.Session()
        user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
        if user and password:
            self.session.auth = (user, password)
        elif os.environ.get("MLFLOW_TRACKING_TOKEN"):
            self.session.headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"

    def _call(self, endpoint: str, body: dict | None = None, query: dict | None = None) -> dict | None:
        """One request to the REST API, its answer's JSON object (`_raw`)."""
        content = self._raw(self.base + endpoint, body, query)
        return None if content is None else _json_object(content, self.base + endpoint)

    def read_artifact(self, run_id: str, path: str) -> bytes | None:
        """A run's artifact file, as the server hands it to its UI (`/get-artifact`); None
        where the run has none at `path`."""
        return self._raw(self.uri.rstrip("/") + "/get-artifact", None, {"run_id": run_id, "path": path},
                         missing=(404,))

    def _raw(self, url: str, body: dict | None, query: dict | None, missing=()) -> bytes | None:
        """One request, retried as MLflow's client retries (a few times on 429 and 5xx, with a
        doubling wait); None for MLflow's RESOURCE_DOES_NOT_EXIST (or a status in `missing`);
        StoreReadError, in one line, otherwise."""
        import requests

        retries = int(os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3"))
        wait = float(os.environ.get("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"))
        for attempt in range(retries + 1):
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise StoreReadError(f"{self.uri}: the store's answers took over {READ_DEADLINE_S:g} s in all "
                                     "(DSPARK_SWEEPS_READ_DEADLINE_S); is the server overloaded?")
            try:
                answer, content = self._request(url, body, query, left)
            except requests.RequestException as e:
                raise StoreReadError(f"{url}: {_one_line(_cause(e))}") from None
            if answer.ok:
                return content
            detail = _one_line(content.decode(errors="replace"))
            if answer.status_code in missing or (answer.status_code == 404 and "RESOURCE_DOES_NOT_EXIST" in detail):
                return None
            if answer.status_code not in RETRY_CODES or attempt == retries:
                raise StoreReadError(f"HTTP {answer.status_code} from {url}: {_mlflow_message(detail)}")
            time.sleep(wait * 2 ** attempt)
        raise StoreReadError(f"{url}: no answer")  # pragma: no cover (the loop returns or raises)

    def _request(self, url: str, body: dict | None, query: dict | None, left: float):
        """One request and its whole answer, in a thread the command waits `left` seconds for:
        `requests`' timeout bounds each wait on the socket, not a server that drips its answer
        a byte at a time; past the deadline the command goes on and the thread is left to die
        with it."""
        box: dict = {}

        def ask():
            try:
                answer = (self.session.post(url, json=body, timeout=min(self.timeout, left), stream=True)
                          if body is not None else
                          self.session.get(url, params=query, timeout=min(self.timeout, left), stream=True))
                box["answer"], box["content"] = answer, self._body(answer, url)
            except BaseException as e:  # handed to the caller's thread
                box["error"] = e

        worker = threading.Thread(target=ask, daemon=True, name="store-read")
        worker.start()
        worker.join(left)
        if worker.is_alive():
            raise StoreReadError(f"{self.uri}: the store's answers took over {READ_DEADLINE_S:g} s in all "
                                 "(DSPARK_SWEEPS_READ_DEADLINE_S); is the server answering slowly?")
        if "error" in box:
            raise box["error"]
        return box["answer"], box["content"]

    def _body(self, answer, url: str) -> bytes:
        """An answer's bytes, at most MAX_ANSWER_BYTES."""
        size = answer.headers.get("Content-Length")
        if size and size.isdigit() and int(size) > MAX_ANSWER_BYTES:
            answer.close()
            raise StoreReadError(f"{url}: an answer of {int(size)} bytes, over the {MAX_ANSWER_BYTES // 2**20} MiB "
                                 "a read takes")
        parts, total = [], 0
        for chunk in answer.iter_content(CHUNK):
            parts.append(chunk)
            total += len(chunk)
            if total > MAX_ANSWER_BYTES:
                answer.close()
                raise StoreReadError(f"{url}: an answer over the {MAX_ANSWER_BYTES // 2**20} MiB a read takes")
        return b"".join(parts)

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


MAX_ITEMS_BYTES = 8 * 1024 * 1024


def run_items(client, run) -> dict[str, float]:
    """The item columns (`trials.store.items`) of a run's items artifact; {} for a run without one
    (recorded before it, whose item columns are its metrics). StoreReadError, in one line,
    where the tagged artifact is missing or is not one, or is another run's. A response whose
    items were logged with another value than the run's now (it was measured again without
    items, as a timing pass with too few prompts does) has no items: they describe another value."""
    doc = _item_doc(client, run)
    if doc is None:
        return {}
    stale = _stale(doc, run)
    return {k: v for k, v in columns(doc).items() if not _of(k, stale)}


def _of(column: str, responses: set[str]) -> bool:
    return any(column.startswith(f"jack/{r}@") for r in responses)


def _stale(doc: dict, run) -> set[str]:
    """The responses whose items were logged with a value that is not the run's value now."""
    out = set()
    for response, v in (doc.get("values") or {}).items():
        now = run.data.metrics.get(store_key(str(response)))
        if now is not None and not (isinstance(v, (int, float)) and math.isclose(float(v), now, rel_tol=1e-9,
                                                                                   abs_tol=1e-12)):
            out.add(str(response))
    return out


def _bound(doc: dict, run) -> str:
    """Why an items document is not this run's ("" where it is, or predates the binding)."""
    if doc.get("run") not in (None, run.info.run_id):
        return f"it is run {str(doc['run'])[:40]}'s"
    if not isinstance(doc.get("values") or {}, dict):
        return "its values are not a mapping of response -> value"
    return ""


def _item_doc(client, run) -> dict | None:
    """A run's items artifact, checked (`trials.store.items.columns`, `_bound`); None where the
    run has none."""
    if not run.data.tags.get(ITEMS_TAG):
        return None
    run_id = run.info.run_id
    try:
        raw = client.read_artifact(run_id, ITEMS_FILE) if hasattr(client, "read_artifact") else \
            _downloaded(client, run, ITEMS_FILE)
    except StoreReadError:
        raise
    except Exception as e:  # MLflow's artifact repositories raise many kinds
        raise StoreReadError(f"run {run_id}: its {ITEMS_FILE} could not be read ({type(e).__name__}: "
                             f"{_one_line(str(e), 120)})") from None
    if raw is None:
        raise StoreReadError(f"run {run_id}: tagged {ITEMS_TAG} but it has no {ITEMS_FILE}")
    if len(raw) > MAX_ITEMS_BYTES:  # a few KB per response: one this size is not an evaluation's items
        raise StoreReadError(f"run {run_id}: {ITEMS_FILE} is {len(raw):,} bytes, past {MAX_ITEMS_BYTES:,}; not read")
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
        doc = bounded_json(text, ITEMS_FILE)
        columns(doc)  # ValueError where it is not one
        if (why := _bound(doc, run)):
            raise ValueError(f"not this run's items: {why}")
    except (ValueError, UnicodeDecodeError) as e:
        raise StoreReadError(f"run {run_id}: {ITEMS_FILE}: {_one_line(str(e), 120)}") from None
    return doc


def run_item_document(client, run) -> dict | None:
    """A run's items artifact as a document, for a writer to merge into; None where it has none.
    The values its responses were logged with stay bound to them: a merge of another
    response's items must not unbind them (the stale check, `_stale`, reads them)."""
    doc = _item_doc(client, run)
    return document(columns(doc), doc, values=doc.get("values")) if doc is not None else None


def _downloaded(client, run, path: str) -> bytes | None:
    """An artifact's bytes: read in place from a local artifact root, otherwise through
    MLflow's client (any artifact store it speaks), without its progress bar."""
    import tempfile
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    root = getattr(run.info, "artifact_uri", "") or ""
    if root.startswith("file:") or root.startswith("/"):
        local = Path(unquote(urlparse(root).path) if root.startswith("file:") else root) / path
        return local.read_bytes() if local.is_file() else None
    before = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # a bar per run on a reading command's stderr
    try:
        with tempfile.TemporaryDirectory(prefix="items-") as tmp:
            return Path(client.download_artifacts(run.info.run_id, path, tmp)).read_bytes()
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = before


def _cause(e: BaseException) -> str:
    """The innermost reason `requests` gives (a refused connection, a name not found)."""
    while e.__context__ is not None and not str(e):
        e = e.__context__
    text = str(e) or type(e).__name__
    return "connection refused (is the server running?)" if "Connection refused" in text else text


def _json_object(content: bytes, url: str) -> dict:
    try:
        found = bounded_json(content.decode(), "answer") if content else {}
    except (ValueError, UnicodeDecodeError):
        found = None
    if not isinstance(found, dict):
        raise StoreReadError(f"{url}: the answer is not MLflow's JSON (is this an MLflow server?)")
    return found


