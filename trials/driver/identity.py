"""One sweep per name per store. A sweep's parent run records, when it is made, where the
sweep's storage is (`sweep.storage`: the storage root) and what it runs
(`sweep.trials_sha256`: a SHA-256 of its first replicate block's resolved trials, each
trial's key and config, as `trials.spec.same_design` compares them; later blocks follow
from the same name, base and factors, so `trials augment` keeps the fingerprint).

`check_same_sweep` runs before any work (before Ray starts, before anything trains or is
written) in `trials run`, `resume`, `augment`, `reeval`, `time` and `recover`: a command whose
sweep has the name of one the store holds, but another storage root or other trials, is
refused in one line naming the existing sweep's storage and the ways on (another name, or
`trials resume NAME --storage THAT`). Without it a second sweep under the same name kept
the first one's runs as its own and printed their means, or merged both sweeps' runs in one
experiment. The same spec into the same storage passes: that is a rerun, which resumes.

Storage that moved (the recorded root no longer holds the sweep, and this root holds its
saved spec) is the same sweep when its trials are: its parent's record is updated. A
parent made before these tags existed is adopted by the next command that opens it.

Two drivers of one name started at the same instant both read "no such sweep" before either
writes. So the claim is one atomic write (`claim`): the sweep's experiment is created with
its identity in its tags, in one request; MLflow's unique experiment names (on SQLite and on
PostgreSQL alike) let only one creation win, and the other driver reads the winner's
identity and is refused where it differs. The fingerprint includes the workload.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trials.store.client import SQLITE, sqlite_path, tracking_client
from trials.store.keys import STORAGE_TAG, TRIALS_TAG, sweep_parent
from trials.store.reader import reading_client


def fingerprint(spec, with_workload: bool = True) -> str:
    """SHA-256 of the workload and the first replicate block's trials: each one's key and
    resolved config (`with_workload` False: as recorded before the workload counted)."""
    rows = sorted((t.key, repr(sorted(t.config.to_dict().items()))) for t in spec.trials if t.replicate == 0)
    if with_workload:
        rows = [["workload", spec.workload], *rows]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def identity_tags(spec, root: Path) -> dict[str, str]:
    """What the parent records of the sweep (`spec` as saved, before its targets are bound)."""
    return {STORAGE_TAG: str(root), TRIALS_TAG: fingerprint(spec)}


def check_same_sweep(spec, tracking_uri: str, root: Path, command: str) -> None:
    """Refuse, in one line, a sweep that the store holds under this name with another
    storage root or other trials (see the module docstring)."""
    tags = stored_parent_tags(tracking_uri, spec.name)
    if tags is None:
        return
    held, sha, name = tags.get(STORAGE_TAG), tags.get(TRIALS_TAG), spec.name
    theirs = held or str(root)
    gone = held is not None and not (Path(held) / name / "spec.yaml").is_file()
    way = ("give this sweep another name" if gone and Path(held) != root else
           f"give this sweep another name, or continue that one with: trials resume {name} --storage {theirs}")
    if held and Path(held) != root and not (gone and (root / name / "spec.yaml").is_file()):
        raise ValueError(f"{command}: sweep {name!r} already exists in the store {tracking_uri} with its storage at "
                         f"{held}{' (which no longer holds it)' if gone else ''}, not {root}; {way}")
    if sha and sha not in (fingerprint(spec), fingerprint(spec, with_workload=False)):
        raise ValueError(f"{command}: sweep {name!r} already exists in the store {tracking_uri} with other trials "
                         f"(another workload, base config or design; its storage: {theirs}); {way}")


def claim(spec, tracking_uri: str, root: Path, command: str) -> None:
    """Claim the sweep's name in the store in one atomic write (module docstring): create its
    experiment with the sweep's identity as tags, or, where it exists with an identity, refuse
    in one line one that differs (its storage is updated where `check_same_sweep` found that
    it moved)."""
    from mlflow.exceptions import MlflowException

    mine = identity_tags(spec, root)
    client = tracking_client(tracking_uri)
    exp = client.get_experiment_by_name(spec.name)
    if exp is None:
        try:
            client.create_experiment(spec.name, tags=mine)
            return
        except MlflowException as e:
            if "RESOURCE_ALREADY_EXISTS" not in str(getattr(e, "error_code", "")) and \
                    "already exists" not in str(e).lower() and "unique" not in str(e).lower():
                raise
        exp = client.get_experiment_by_name(spec.name)  # another driver's creation won
    held, sha = exp.tags.get(STORAGE_TAG), exp.tags.get(TRIALS_TAG)
    if held is None and sha is None:  # made before experiments carried it: the parent's record decides
        for k, v in mine.items():
            client.set_experiment_tag(exp.experiment_id, k, v)
        return
    if sha not in (mine[TRIALS_TAG], fingerprint(spec, with_workload=False)):
        raise ValueError(f"{command}: sweep {spec.name!r} is claimed in the store {tracking_uri} by another driver "
                         f"with other trials (another workload, base config or design; its storage: {held}); give "
                         "this sweep another name")
    if held != str(root):
        moved = (root / spec.name / "spec.yaml").is_file() and not (Path(held) / spec.name / "spec.yaml").is_file()
        if not moved:  # another driver's sweep (its storage may hold nothing yet: it claimed an instant ago)
            raise ValueError(f"{command}: sweep {spec.name!r} is claimed in the store {tracking_uri} by a driver with "
                             f"its storage at {held}, not {root}; give this sweep another name, or continue that one "
                             f"with: trials resume {spec.name} --storage {held}")
        client.set_experiment_tag(exp.experiment_id, STORAGE_TAG, str(root))  # the sweep's storage moved here


def stored_parent_tags(tracking_uri: str, name: str) -> dict[str, str] | None:
    """The tags of the parent run of sweep `name` in the store, or None when the store holds
    no such sweep (a SQLite store that does not exist yet, or is an empty file, holds none).
    Read through `trials.store.reader` (MLflow's REST API for a server: this runs before
    every sweep)."""
    if tracking_uri.startswith(SQLITE):
        path = sqlite_path(tracking_uri)
        if not path.is_file() or path.stat().st_size == 0:
            return None
    client = reading_client(tracking_uri)
    exp = client.get_experiment_by_name(name)
    parent = sweep_parent(client, exp.experiment_id) if exp is not None else None
    return None if parent is None else dict(parent.data.tags)
