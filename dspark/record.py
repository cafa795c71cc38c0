"""The MLflow record format of a sweep, in one place: what the writer (`trials`) puts in
the store and the reader (`analysis`) takes out. Plain names and string functions only:
importing it loads neither MLflow nor torch, so `analysis` stays free of both `trials`
and torch.

- Metric names: MLflow refuses '@', so the trainer's `tf/accept@3` is stored as
  `tf/accept:3`; `metric_name` maps it back. Tune's results keep the trainer's names.
- Tags: `mlflow.parentRunId` links a trial's run to its sweep's parent run (tagged
  `sweep_parent=true`); `factor.<name>` holds each factor's level.
- The UI link (`ui_url`) names the model-training view, which MLflow 3 does not pick alone,
  and the sweep's saved runs view (`runs_view`, an experiment tag).
- The default store is `sqlite:///mlflow.db`; a relative sqlite path is resolved against
  the current folder and saved absolute.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
PARENT_TAG = "mlflow.parentRunId"
SWEEP_PARENT_TAG = "sweep_parent"
FACTOR_PREFIX = "factor."
RESPONSES_TAG = "responses"  # on the parent: JSON {response: {better, margin}}, the primary responses
SEQUENTIAL_TAG = "sequential"  # on the parent: JSON of analysis.sequential.Plan: the declared plan and every look
PRIMARY_TERMS_TAG = "primary_terms"  # on the parent: JSON list of the spec's primary terms ([] = the default)
LOOK_PREFIX = "look."  # on the parent: look.<k> = JSON of that look's blocks, alpha, verdict counts and action
VERDICT_PREFIX = "verdict."  # on the parent: verdict.<response>.<term> = matters|negligible|undecided
# a trial run's tags (trials.spec.Trial.tags) and the parent's params and tags
TRIAL_KEY_TAG = "trial_key"  # cell + replicate: what finds a trial's run again
CELL_TAG, REPLICATE_TAG, SEED_TAG, ARM_TAG, RUN_ORDER_TAG = "cell", "replicate", "seed", "arm", "run_order"
DESCRIPTION_TAG = "description"
FACTORS_PARAM, DESIGN_PARAM = "factors", "design"  # the parent's: factor -> levels (JSON, spec order); full | 2^(k-p)
# on the parent, recorded when it is made: one sweep per name per store (`trials.identity`)
STORAGE_TAG = "sweep.storage"  # the storage root the sweep's trials, checkpoints and kept records are in
TRIALS_TAG = "sweep.trials_sha256"  # a fingerprint of its first block's resolved trials (keys and configs)
DONE_KEY = "trial/done"  # 1.0 in a trial's last result (and metric): its final metrics were all reported
SQLITE = "sqlite:///"
# the experiment's kind, for MLflow versions whose UI reads it (3.17 reads the link instead)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def store_key(name: str) -> str:
    """The stored name of a trainer metric (`tf/accept@3` -> `tf/accept:3`)."""
    return name.replace("@", ":")


def metric_name(stored: str) -> str:
    """The trainer's name of a stored metric (`tf/accept:3` -> `tf/accept@3`)."""
    return stored.replace(":", "@")


def sweep_trials(client, experiment_id: str, page_size: int = 5000) -> list:
    """Every trial run of a sweep's experiment (the runs with a trial key), all pages: the
    one query that decides which runs are a sweep's trials."""
    out, token = [], None
    while True:
        page = client.search_runs([experiment_id], f"tags.{TRIAL_KEY_TAG} != ''", max_results=page_size,
                                  page_token=token)
        out.extend(page)
        token = page.token
        if not token:
            return out


def sweep_parent(client, experiment_id: str):
    """The sweep's parent run in its experiment, or None."""
    found = client.search_runs([experiment_id], f"tags.{SWEEP_PARENT_TAG} = 'true'", max_results=1)
    return found[0] if found else None


def tag_key(text: str) -> str:
    """Text made a valid MLflow tag key (letters, digits, '_', '-', '.', ' ', ':', '/')."""
    return "".join(ch if ch.isalnum() or ch in "_-. :/" else "_" for ch in text)


def is_metric(key: str) -> bool:
    return "/" in key  # the trainer's names: val/bpb, tf/tau, spec/accept@3, ...


UI_URL = "http://127.0.0.1:5000"  # `mlflow ui` as the README starts it; `--ui-url` elsewhere
TRAINING_VIEW = "workflowType=machine_learning"
RUNS_VIEW = "dspark"  # the share key of a sweep's saved runs view
RUNS_VIEW_TAG = "mlflow.sharedViewState." + RUNS_VIEW  # an experiment tag: MLflow 3's saved views live there


def ui_url(experiment_id: str, base: str = UI_URL, view: bool = False) -> str:
    """The MLflow UI's link to a sweep, opening in the model-training (runs) view; with
    `view`, in the sweep's saved runs view (`runs_view`: the trials with their factors and
    primary responses as columns).

    MLflow 3.17's UI picks the GenAI or the model-training view from the link's
    `workflowType` (else from the browser's last choice, GenAI at first) and ignores the
    experiment's `mlflow.experimentKind` tag, which is set as well for other MLflow versions.
    """
    if view:
        return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?viewStateShareKey={RUNS_VIEW}&{TRAINING_VIEW}"
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}?{TRAINING_VIEW}"


def default_ui_url(tracking_uri: str | None) -> str:
    """Where a store's UI is: an MLflow server serves its own; a file store needs `mlflow ui`
    (127.0.0.1:5000, as the README starts it)."""
    uri = tracking_uri or ""
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else UI_URL


def run_url(experiment_id: str, run_id: str, base: str = UI_URL) -> str:
    """The MLflow UI's page of one run, in the model-training view."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"


def runs_view(factors: list[str], responses: list[str], tags: tuple[str, ...] = (), now_ms: int | None = None) -> str:
    """The value of RUNS_VIEW_TAG: MLflow 3's saved-view envelope around a runs-table state
    that lists the sweep's trials (not the parent), with the factors and the replicate first,
    then the primary responses, as columns (`columnOrder`: the table would put metrics before
    tags, and at 1600 px with MLflow's Assistant panel open the factors fell off the right);
    all of them in the charts, whose view opens on the primary responses' charts alone (its
    search box, a regular expression, holds them). MLflow's UI lists the view under "Views";
    a link with `viewStateShareKey` opens it."""
    import json
    import re

    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    first = [f"tags.`{FACTOR_PREFIX}{f}`" for f in factors] + [f"tags.`{t}`" for t in (*tags, REPLICATE_TAG)]
    metrics = [f"metrics.`{store_key(r)}`" for r in responses]
    state = {
        "selectedColumns": metrics + first,
        "columnOrder": first + metrics,
        "columnWidths": {"attributes.`Run Name`": 230, **{c: 90 for c in first}, **{c: 110 for c in metrics}},
        "searchFilter": f"tags.{TRIAL_KEY_TAG} != ''",
        "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True,
        "runsHiddenMode": "SHOW_ALL",  # the charts' default is the first 10 runs
    }
    if responses:
        state["chartsSearchFilter"] = "^(" + "|".join(re.escape(store_key(r)) for r in responses) + ")$"
    return json.dumps({"name": "dspark: factors and primary responses", "createdAt": now_ms,
                       "updatedAt": now_ms, "state": json.dumps(state)})


def absolute_uri(uri: str) -> str:
    """A relative sqlite path made absolute, so that every command works from any folder."""
    if uri.startswith(SQLITE) and not uri.startswith(SQLITE + "/"):
        return SQLITE + str(Path(uri[len(SQLITE):]).expanduser().resolve())
    return uri


def sqlite_path(uri: str) -> Path:
    """The file a `sqlite:///` URI names, as SQLAlchemy reads it (escapes decoded, any
    `?query` of driver options dropped)."""
    from urllib.parse import unquote

    return Path(unquote(uri[len(SQLITE):].split("?", 1)[0]))


def check_store(uri: str | None) -> None:
    """A reading command creates nothing: a SQLite store that does not exist is refused
    (MLflow would create an empty one)."""
    if uri and uri.startswith(SQLITE):
        path = sqlite_path(uri)
        if not path.is_file():
            raise ValueError(f"tracking-uri: {path} does not exist")


# An HTTP tracking server's client: MLflow's defaults (120 s per request, 7 retries with a
# doubling backoff) block a driver for many minutes when the server is gone. These
# bound a request to about 2 minutes; a user's own setting of any of them wins.
# The last one silences MLflow's "View run ... / View experiment ..." lines, two per trial on
# a tracking server, whose links open the GenAI view: the progress lines and the sweep's own
# link replace them.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "30", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
STORE_TIMEOUT_S = 30.0  # how long a command waits for the store to answer before any work
STORE_RETRY_S = 300.0  # how long a sweep keeps retrying a store write before it stops cleanly


class StoreUnavailable(RuntimeError):
    """The tracking store did not answer (or refused writes) for longer than allowed."""


def tracking_client(uri: str):
    """The one way the project opens an MLflow store: HTTP requests bounded (HTTP_DEFAULTS);
    a SQLite store opened first under a lock that other processes on this machine share,
    since MLflow creates or upgrades its tables on first use and two processes doing that at
    once fail (two sweeps submitted together on a new store)."""
    for k, v in HTTP_DEFAULTS.items():
        os.environ.setdefault(k, v)
    import logging

    from mlflow.tracking import MlflowClient

    # MLflow's SQL store logs every failed statement with its traceback, then raises it: the
    # raised error is the one the CLIs answer, in one line (a full disk printed pages of both)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)

    if not (uri and uri.startswith(SQLITE)) or uri in _SQLITE_OPENED:
        return MlflowClient(uri)  # MLflow keeps a process's store: later clients touch no table
    with sqlite_init_lock(sqlite_path(uri)):
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)  # the first use, which creates the tables
    _SQLITE_OPENED.add(uri)
    return client


_SQLITE_OPENED: set[str] = set()  # the SQLite stores this process has opened (under the lock)


class sqlite_init_lock:
    """An exclusive lock, across processes on this machine, on first opening a SQLite store:
    a lock file in the temporary folder named by the store's absolute path (none is left
    beside the user's store). Opened read-only, so that a file another user made still works."""

    def __init__(self, path: Path):
        import hashlib
        import tempfile

        key = hashlib.sha256(str(Path(path).expanduser().resolve()).encode()).hexdigest()[:24]
        self.file = Path(tempfile.gettempdir()) / f"dspark-sqlite-{key}.lock"

    def __enter__(self):
        import fcntl

        self.fd = os.open(self.file, os.O_RDONLY | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)  # closing the descriptor releases the lock


def store_error(uri: str, e: BaseException) -> str:
    """One line naming the store and the cause (and MLflow's kind of error, where MLflow raised it)."""
    from .reader import StoreReadError

    # SQLAlchemy appends the statement, its parameters (over many lines) and a link to its
    # docs after the cause: everything from the statement on is cut
    text = str(e).split("[SQL:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith(("(Background on this error", "[parameters:"))]
    cause = lines[-1] if lines else type(e).__name__
    if "Max retries exceeded" in str(e) or "Connection refused" in str(e):
        cause = "connection refused (is the server running?)"
    full = disk_full_cause(e)
    if full:
        cause = f"{full}: its disk is full" if "disk is full" not in full else full
    kind = "" if isinstance(e, StoreReadError) else f"{type(e).__name__}: "
    return f"tracking-uri: {uri}: {kind}{cause[:200]}"


def probe_store(uri: str, timeout_s: float = STORE_TIMEOUT_S, writable: bool = False) -> None:
    """Check, before any work, that the store answers as MLflow within `timeout_s`; raise
    ValueError with one line naming the URI and the cause. A SQLite store is checked on
    disk (its folder exists and, for a writer, is writable; an existing file is SQLite)."""
    if uri.startswith(SQLITE):
        path = sqlite_path(uri)
        if path.exists() and not path.is_file():
            raise ValueError(f"tracking-uri: {path} is not a file")
        if path.is_file():
            with open(path, "rb") as f:
                head = f.read(16)
            if head and head != b"SQLite format 3\x00":
                raise ValueError(f"tracking-uri: {path} is not a SQLite database")
        elif not path.parent.is_dir():
            raise ValueError(f"tracking-uri: folder {path.parent} does not exist")
        if writable and not os.access(path if path.is_file() else path.parent, os.W_OK):
            raise ValueError(f"tracking-uri: {path} is not writable")
        return
    outcome: dict = {}

    def ask():
        from .reader import reading_client

        try:
            reading_client(uri).search_experiments(max_results=1)
            outcome["ok"] = True
        except Exception as e:  # MLflow raises many kinds for a store that is not there
            outcome["error"] = e

    worker = threading.Thread(target=ask, daemon=True, name="store-probe")
    worker.start()
    worker.join(timeout_s)
    if "error" in outcome:
        raise ValueError(store_error(uri, outcome["error"]))
    if not outcome.get("ok"):
        raise ValueError(f"tracking-uri: {uri} did not answer within {timeout_s:g} s")


def quiet_broken_pipe() -> int:
    """Exit quietly when whoever reads a command's output stops reading (`| head`): Python
    would print a second error while flushing stdout at exit; point stdout at /dev/null."""
    import sys

    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1


def is_store_error(e: BaseException) -> bool:
    """Whether an exception is the store failing (both CLIs answer it in one line)."""
    return isinstance(e, store_exceptions())


def store_exceptions() -> tuple[type[BaseException], ...]:
    """What a store raises when it is down, locked or unreachable (not a program's bug)."""
    from mlflow.exceptions import MlflowException

    kinds: list[type[BaseException]] = [MlflowException, ConnectionError, TimeoutError]
    try:
        from sqlalchemy.exc import OperationalError

        kinds.append(OperationalError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from requests.exceptions import RequestException

        kinds.append(RequestException)
    except ImportError:  # pragma: no cover
        pass
    return tuple(kinds)


# how SQLite, PostgreSQL and the OS say a store's disk is full, whoever wraps the error
DISK_FULL = ("database or disk is full", "No space left on device", "[Errno 28]", "could not extend file")


def disk_full_cause(e: BaseException) -> str | None:
    """The line saying a store's disk is full, if that is what `e` is (not a transient error:
    no retry frees the disk)."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return os.strerror(errno.ENOSPC)
    for line in str(e).splitlines():
        for mark in DISK_FULL:
            if mark in line:  # SQLAlchemy's line reads "(sqlite3.OperationalError) database or disk is full"
                return line[line.index(mark):][:200] if mark != "[Errno 28]" else "No space left on device"
    return None


def retrying(call, window_s: float = STORE_RETRY_S, first_wait_s: float = 1.0, what: str = "store write"):
    """`call()`, retried with a doubling backoff (at most 30 s a wait) while it raises, for
    at most `window_s` seconds; then StoreUnavailable. For writes that may meet a store
    that is briefly down or locked (SQLite under another writer). A full disk is not
    retried: it raises StoreUnavailable at the first failed write."""
    deadline = time.monotonic() + window_s
    wait = first_wait_s
    kinds = store_exceptions()
    while True:
        try:
            return call()
        except kinds as e:
            full = disk_full_cause(e)
            if full:
                raise StoreUnavailable(f"{what} failed: its disk is full ({full})") from e
            if time.monotonic() + wait > deadline:
                raise StoreUnavailable(f"{what} kept failing for {window_s:g} s: "
                                       f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}") from e
            time.sleep(wait)
            wait = min(wait * 2, 30.0)
