"""The artifacts a sweep trains once and its trials share (`Workload.shared`; DSpark: the
frozen target LM), bound to the trials in one place: `trials run` trains the missing ones as
Ray tasks (`runner.ensure_targets`), `trials run --local` in this process, `reeval` and
`time` refuse a missing one, and `recover` binds those storage holds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


def addresses(spec) -> dict[str, tuple[str, dict[str, str]]]:
    """trial key -> (its shared artifact's hash, the tags naming it); {} for a workload that
    shares nothing."""
    art = spec.wl.shared
    cache: dict = {}  # the workload's own (DSpark: each corpus hashed once)
    return {t.key: art.address(t.config, cache) for t in spec.trials} if art is not None else {}


def needed(spec, found: dict[str, tuple[str, dict[str, str]]]) -> dict[str, object]:
    """artifact hash -> a config that trains it, for every artifact a trial uses."""
    art = spec.wl.shared
    return {found[t.key][0]: t.config for t in spec.trials if art is not None and art.needed(t.config)}


def bound(spec, found: dict[str, tuple[str, dict[str, str]]], paths: dict[str, str]):
    """(the spec with each trial that uses an artifact pointed at its file in `paths`, each
    trial's tags naming its artifact). A trial whose artifact is not in `paths` is left as it
    is; every other field of a trial (its run order among them) is kept."""
    art = spec.wl.shared
    tags, trials = {}, []
    for t in spec.trials:
        h, tags[t.key] = found.get(t.key, ("", {}))
        if art is not None and art.needed(t.config) and h in paths:
            t = dataclasses.replace(t, config=art.bind(t.config, paths[h]))
        trials.append(t)
    return dataclasses.replace(spec, trials=trials), tags


def in_storage(spec, root: Path, found: dict[str, tuple[str, dict[str, str]]]) -> dict[str, str]:
    """artifact hash -> its file, for every needed artifact that storage holds."""
    art = spec.wl.shared
    out = {}
    for h in needed(spec, found):
        path = art.file(root, h)
        if path.is_file():
            out[h] = str(path)
    return out
