"""How the project opens an MLflow store, in one place: the store's URI forms, the one
client factory (`tracking_client`), the retry of a write, and the one-line answer every CLI
gives when a store fails (`store_error`, `cli_errors`).

The default store is `sqlite:///mlflow.db`; a relative sqlite path is resolved against the
current folder and saved absolute.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from pathlib import Path

from .keys import StoreReadError, is_part, split_tag

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
SQLITE = "sqlite:///"


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


def set_tags(client, run_id: str, tags: dict[str, str]) -> None:
    """Tags on a run with no value cut short: a value past MLflow's limit goes in parts
    (`keys.split_tag`), the parts written before the header that names them, so a write cut
    short leaves the record as it was; the parts the old header named are deleted after."""
    from mlflow.entities import RunTag  # MLflow: only where a record is written

    stored = {key: split_tag(key, v) for key, v in tags.items()}
    parts = [RunTag(k, v) for key, t in stored.items() for k, v in t.items() if k != key]
    old = client.get_run(run_id).data.tags
    for i in range(0, len(parts), 100):  # 100 parts of 5,000 characters: half of a batch's 1 MB
        client.log_batch(run_id, tags=parts[i:i + 100])
    client.log_batch(run_id, tags=[RunTag(key, t[key]) for key, t in stored.items()])
    for key, t in stored.items():
        for k in old:
            if is_part(key, k) and k not in t:
                client.delete_tag(run_id, k)


def store_error(uri: str, e: BaseException) -> str:
    """One line naming the store and the cause (and MLflow's kind of error, where MLflow raised it)."""
    # SQLAlchemy appends the statement, its parameters (over many lines) and a link to its
    # docs after the cause: everything from the statement on is cut
    text = str(e).split("[SQL:", 1)[0]
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith(("(Background on this error", "[parameters:"))]
    cause = lines[-1] if lines else type(e).__name__
    if "Max retries exceeded" in str(e) or "connection refused" in str(e).lower():
        cause = "connection refused (is the server running?)"
    full = disk_full_cause(e)
    if full:
        cause = f"{full}: its disk is full" if "disk is full" not in full else full
    kind = "" if isinstance(e, StoreReadError) else f"{type(e).__name__}: "
    return f"tracking-uri: {uri}: {kind}{cause[:300]}"


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
            if mark in line:  # SQLAlchemy's line names its driver, then "database or disk is full"
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


@contextlib.contextmanager
def one_http_attempt():
    """MLflow's HTTP session retries every verb, a POST too: when the server commits a write
    and its answer is lost (the server killed mid-request), MLflow sends it again and the
    points land twice. Inside this block a write is tried once and its failure raised, so
    that the caller, which can read what landed, retries instead (`SweepTracker`)."""
    key = "MLFLOW_HTTP_REQUEST_MAX_RETRIES"
    before = os.environ.get(key)
    os.environ[key] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


SWEEP_STORE = "(the sweep's store)"  # how a store error names a store the command took from the sweep


# What a terminal would act on rather than show: C0 and C1 controls but newline and tab, and the
# bidirectional overrides that reorder what a line shows; kept: colours (SGR, ESC [ ... m).
_CONTROL = re.compile(r"\x1b\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str) -> str:
    """Text as a terminal should show it: every control character escaped (`\x1b`, `\u202e`),
    so that a name or description from a store, a file or a spec reaches the screen as text,
    never as a command to the terminal (a title, a link, a cursor move, a clipboard write)."""
    def escape(m: re.Match) -> str:
        s = m.group()
        if s.startswith("\x1b[") and s.endswith("m"):
            return s
        return s.encode("unicode_escape").decode("ascii")
    return _CONTROL.sub(escape, text)


class _Shown:
    """A text stream that writes `terminal_text` of everything it is given."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, text: str) -> int:
        self._raw.write(terminal_text(text))
        return len(text)

    def __getattr__(self, name):  # flush, isatty, fileno, encoding: the stream's own
        return getattr(self._raw, name)


def run_command(prog: str, command, tracking_uri: str | None, refusals: tuple = ()) -> int:
    """The one way every CLI (`trials`, `analysis`, `dspark train`) ends: `command()`'s exit
    code, or one line on stderr for what it could not do, never a traceback for input or a
    store:

    - a closed pipe (`| head`): quietly, exit 1;
    - `refusals`: (exception kind, exit code, its lines) for the command's own refusals
      (a spec's problems, one line each; the analysis' "cannot analyse");
    - bad input (ValueError): one line, exit 2;
    - the store failing (`is_store_error`): one line naming it (`store_error`), exit 3;
    - a file that cannot be written (a full or read-only disk): one line naming it, exit 4.
    Anything else is a bug and raises. Everything it prints shows control characters escaped
    (`terminal_text`): stdout, for the command's whole run, and its error lines."""
    import sys

    def say(line: str) -> None:
        print(terminal_text(f"{prog}: {line}"), file=sys.stderr)

    shown, sys.stdout = sys.stdout, _Shown(sys.stdout)
    try:
        code = command()
        sys.stdout.flush()  # inside the try: a closed pipe is met here, not at exit
        return code
    except BrokenPipeError:  # the reader of our output went away: not the store's fault
        return quiet_broken_pipe()
    except Exception as e:
        for kind, code, lines in refusals:
            if isinstance(e, kind):
                for line in lines(e):
                    say(line)
                return code
        if isinstance(e, ValueError):
            say(f"error: {e}")
            return 2
        if is_store_error(e):
            say(f"error: {store_error(tracking_uri or SWEEP_STORE, e)}")
            return 3
        if isinstance(e, OSError) and e.filename:  # nothing half-written is left: every file is written whole
            say(f"error: cannot write {e.filename}: {e.strerror or e}")
            return 4
        raise
    finally:
        sys.stdout = shown

