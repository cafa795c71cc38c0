"""The check every command makes of its store before any work (`probe_store`): a SQLite file
on disk, or any other store asked for one experiment within a deadline, through the reading
client (`trials.store.reader`); every failure one line naming the URI and the cause."""

from __future__ import annotations

import os
import threading

from .client import SQLITE, STORE_TIMEOUT_S, sqlite_path, store_error
from .reader import reading_client


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
