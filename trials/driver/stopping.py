"""How a sweep's driver stops short: SIGINT and SIGTERM in every phase (`Signals`), and a
sweep that did not end closed as far as it can and said in one exception (`Interrupted`,
`StoreStopped`, `StorageStopped`)."""

from __future__ import annotations

import signal
from typing import Any

from trials.store.client import StoreUnavailable
from trials.tracking import StorageFull, is_storage_full

from .cluster import local_gcs_gone
from .ledger import Ledger


class Interrupted(KeyboardInterrupt):
    """The sweep was stopped by a signal; `signum` says which (SIGINT or SIGTERM).
    `ray_lost`: the signal went to the whole process group and took down the local Ray this
    driver started (its processes share the group), so nothing may wait on Ray any more."""

    def __init__(self, signum: int, ray_lost: bool = False):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.ray_lost = ray_lost


class Signals:
    """SIGINT and SIGTERM stop the driver in every phase, foreground or background.

    Before Tune runs (the shared target, MLflow set-up) a signal raises `Interrupted` at
    once. While Tune runs, a SIGTERM is handed to Tune as the SIGINT it stops on
    gracefully (state saved, runs closed). A shell starts background jobs with SIGINT
    ignored, which is why SIGINT is handled here too rather than left to Python's default.
    """

    def __init__(self, local_ray: bool = False):
        self.signum: int | None = None
        self.in_tune = False
        self.local_ray = local_ray  # this driver started its Ray: its processes share our group
        self.ray_lost = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, frame):
        self.signum = self.signum or signum
        if signum == signal.SIGTERM and self.local_ray and local_gcs_gone():
            # the group's SIGTERM (timeout, scancel, a service manager) stopped Ray's GCS too:
            # Tune's graceful stop would wait 60 s on it and die; leave Tune and Ray at once
            self.ray_lost = True
            raise Interrupted(signum, ray_lost=True)
        if self.in_tune:
            # Tune's own SIGINT handler (installed by fit) stops it gracefully
            handler = signal.getsignal(signal.SIGINT)
            if callable(handler) and handler != self._handle:
                handler(signal.SIGINT, frame)
                return
        raise Interrupted(signum)

    def __enter__(self):
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread: leave the signals alone
            self._previous = {}
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


def raise_stopped(e: BaseException, ledger: Ledger | None, name: str, tracking_uri: str, signals: "Signals") -> None:
    """A sweep that did not end: close what can be closed, then say why in one exception."""
    gone = store_failure(e)
    closed = ledger is not None and best_effort(
        lambda: (ledger.close_open_runs("KILLED"), ledger.finish(ledger.parent_id, "KILLED")))
    if gone is not None:
        raise StoreStopped(f"{name}: stopped, the store {tracking_uri} failed: {gone}", closed=closed) from None
    full = in_chain(e, lambda x: isinstance(x, StorageFull) or (isinstance(x, OSError) and is_storage_full(x)))
    if full is not None:
        why = full if isinstance(full, StorageFull) else f"storage is full ({full})"
        raise StorageStopped(f"{name}: stopped, {why}", closed=closed) from None
    if isinstance(e, KeyboardInterrupt) and not isinstance(e, Interrupted):
        # Ray turns a signal that lands inside ray.get into a bare KeyboardInterrupt
        raise Interrupted(signals.signum or signal.SIGINT, ray_lost=signals.ray_lost) from None


class StoreStopped(RuntimeError):
    """The sweep stopped because its store stayed unwritable past the retry window (or its
    disk is full); `closed` says whether the driver could still close its runs."""

    def __init__(self, message: str, closed: bool = True):
        super().__init__(message)
        self.closed = closed


class StorageStopped(StoreStopped):
    """The sweep stopped because its storage filled up: resumable once there is room."""


def store_failure(e: BaseException) -> StoreUnavailable | None:
    """The StoreUnavailable behind an exception (Tune wraps a callback's), if any."""
    return in_chain(e, lambda x: isinstance(x, StoreUnavailable))


def in_chain(e: BaseException | None, match) -> BaseException | None:
    """The first exception in `e`'s cause/context chain that `match`es, if any."""
    seen = 0
    while e is not None and seen < 10:
        if match(e):
            return e
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def best_effort(call) -> bool:
    """Close what can be closed when the store may be gone: a failure here must not hide
    the one that stopped the sweep (the next resume or `status` closes what is left).
    Whether it succeeded."""
    try:
        call()
        return True
    except Exception:  # noqa: BLE001
        return False
