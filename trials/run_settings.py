"""How `trials.runner.run` runs a sweep (`RunSettings`), apart from the runner so that
`trials augment` and the CLI build one without Ray's import."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trials.store.client import DEFAULT_TRACKING_URI, STORE_RETRY_S, STORE_TIMEOUT_S

if TYPE_CHECKING:
    from ray.tune import Callback

DEFAULT_RESOURCE_WAIT_S = 600.0


@dataclass(frozen=True)
class RunSettings:
    """What `run` takes besides the spec (also as its keywords of the same names).

    tracking_uri, storage: where results go (the MLflow store; Tune's storage root, None: `ray_results`).
    store_timeout_s, store_retry_s: the store's time to answer before any work, and to take a failing write.
    address, max_concurrent, resource_wait_s: the Ray cluster (None: a local one of the sweep's own), and its use.
    resume, extend, command, leased: the sweep already in storage, and the lease this driver holds on it.
    verbose, callbacks: what the sweep prints, and who else hears Tune's events.
    """
    tracking_uri: str = DEFAULT_TRACKING_URI
    storage: str | None = None
    store_timeout_s: float = STORE_TIMEOUT_S
    store_retry_s: float = STORE_RETRY_S
    address: str | None = None
    max_concurrent: int | None = None
    resource_wait_s: float = DEFAULT_RESOURCE_WAIT_S
    resume: bool = False
    extend: bool = False
    command: str | None = None
    leased: Callable[[Path], None] | None = None
    verbose: int = 1
    callbacks: Sequence[Callback] = ()
