"""`trials recover NAME`: rebuild a sweep's MLflow records from Tune's result files.

Tune writes every result a trial reports to `<storage>/<sweep>/<trial dir>/result.json`,
one JSON object per line, whatever happens to the tracking store. A store that was deleted,
replaced or missed writes while its server was down is rebuilt from them: the experiment,
the parent run, one run per trial (found again by its `trial_key`, so nothing is
duplicated), every metric point at its step, and the run's end. A trial whose results end
with `trial/done` ends FINISHED with its config, final metrics and plots; any other ends
KILLED, so that `trials resume` continues it from its newest checkpoint.

Then what came after the trials, which Tune's files do not hold, is replayed from the
records `trials.store.kept` keeps in storage as it is written: each re-evaluation (`trials
reeval`) and timing pass (`trials time`) at its step, with its tags and artifacts, and the
parent's timing pass and sequential record (the plan and every look), in the order written.
A point the run already holds at that step or later is not logged again.

`trials resume` replays the same result files first (points the store missed while it could not
be written), and refuses a store that holds no record of trials the storage has results
for: resuming there would rerun finished trials into empty runs.
"""

from __future__ import annotations

from pathlib import Path

from trials.store.keys import (DONE_KEY, GIT_COMMIT_TAG, KILLED_REASON_TAG, RECOVERED_FROM_TAG, TRIAL_KEY_TAG,
                               is_metric, sweep_trials)
from trials.store.runs import finite, git_commit, log_run_files, loggable

from trials import layout
from trials.driver import shared_artifacts
from .layout import read_results
from trials.driver.identity import check_same_sweep, identity_tags
from trials.spec import SweepSpec, Trial
from trials.store.kept import read_records
from trials.store.client import SQLITE, set_tags, sqlite_path, tracking_client


def trial_dirs(spec: SweepSpec, exp_dir: Path) -> dict[str, list[Path]]:
    """trial key -> its trial folders holding results, oldest first."""
    return layout.trial_dirs([t.key for t in spec.trials], exp_dir)


def with_results(spec: SweepSpec, exp_dir: Path) -> list[str]:
    """The keys of the trials that reported at least one metric to storage."""
    return [k for k, dirs in trial_dirs(spec, exp_dir).items()
            if any(is_metric(m) for r in read_results(dirs) for m in r)]


def missing_records(spec: SweepSpec, exp_dir: Path, tracking_uri: str) -> list[str]:
    """The trials that storage holds results for and the store has no run of."""
    have = with_results(spec, exp_dir)
    if not have:
        return []
    if tracking_uri.startswith(SQLITE) and not sqlite_path(tracking_uri).is_file():
        return have  # the store's file is gone: opening it would create an empty one
    client = tracking_client(tracking_uri)
    exp = client.get_experiment_by_name(spec.name)
    if exp is None:
        return have
    known = {r.data.tags.get(TRIAL_KEY_TAG) for r in sweep_trials(client, exp.experiment_id)}
    return [k for k in have if k not in known]


def replay(ledger, tracker_tags: dict[str, dict[str, str]], spec: SweepSpec, exp_dir: Path,
           close: bool) -> dict[str, int]:
    """Log what the store lacks of every trial's results: each metric at each step it does
    not hold yet (a step is logged once, as the tracker does). With `close`, each run then
    ends FINISHED (results end with `trial/done`) or KILLED. Returns counts."""
    counts = {"runs": 0, "points": 0, "finished": 0, "killed": 0}
    trials = {t.key: t for t in spec.trials}
    runs = ledger.child_runs()
    for key, dirs in trial_dirs(spec, exp_dir).items():
        results = read_results(dirs)
        if not any(is_metric(m) for r in results for m in r):
            continue
        counts["runs"] += 1
        if key in runs:  # its run exists: add the points it lacks, leave its state to the caller
            if runs[key].info.status == "FINISHED":
                continue
            run_id = runs[key].info.run_id
        else:
            run_id, _ = ledger.open_child(trials[key], tracker_tags.get(key, {}))
        counts["points"] += _log_missing(ledger, run_id, results)
        if close:
            finished = _close_run(ledger, run_id, trials[key], results, dirs)
            counts["finished" if finished else "killed"] += 1
    return counts


def _log_missing(ledger, run_id: str, results: list[dict]) -> int:
    last = ledger.last_steps(run_id)
    n = 0
    for result in results:
        step = int(result.get("step", 0) or 0)
        metrics = {k: float(v) for k, v in loggable(result, step, last).items()}
        if metrics:
            ledger.log_metrics(run_id, metrics, step)
            last.update({k: step for k in metrics})
            n += len(metrics)
    return n


def _close_run(ledger, run_id: str, trial: Trial, results: list[dict], dirs: list[Path]) -> bool:
    final = results[-1] if results else {}
    if not final.get(DONE_KEY):
        ledger.finish(run_id, "KILLED")
        ledger.client.set_tag(run_id, KILLED_REASON_TAG, "recovered from storage: the trial had not finished")
        return False
    last = {k: float(v) for k, v in final.items() if is_metric(k) and finite(v)}
    ckpts = sorted((c for d in dirs for c in d.glob("checkpoint_*") if (c / "artifacts").is_dir()),
                   key=lambda c: c.stat().st_mtime_ns)
    log_run_files(ledger.client, run_id, trial.config.to_dict(), last, ckpts[-1] / "artifacts" if ckpts else None)
    ledger.finish(run_id, "FINISHED")
    return True


def recover(spec: SweepSpec, exp_dir: Path, tracking_uri: str) -> dict[str, int]:
    """Rebuild the sweep's records in `tracking_uri`, then replay what storage kept of the
    store's later records (`trials.store.kept`); the parent ends FINISHED when every trial did,
    else KILLED (resume it). Everything is checked before the store is written: a store that
    holds another sweep under this name, and every kept record."""
    from .tracking import open_ledger

    check_same_sweep(spec, tracking_uri, exp_dir.parent, "recover")
    if not with_results(spec, exp_dir):
        raise ValueError(f"recover: no trial of sweep {spec.name!r} has results in {exp_dir}")
    kept = read_records(exp_dir, [t.key for t in spec.trials])
    identity = identity_tags(spec, exp_dir.parent)
    found = shared_artifacts.addresses(spec)
    spec = shared_artifacts.bound(spec, found, shared_artifacts.in_storage(spec, exp_dir.parent, found))[0]  # each trial as it ran
    ledger = open_ledger(tracking_uri, spec, identity)
    commit = git_commit()
    tags = {t.key: {**found.get(t.key, ("", {}))[1], GIT_COMMIT_TAG: commit} for t in spec.trials}
    counts = replay(ledger, tags, spec, exp_dir, close=True)
    counts["kept"] = replay_kept(ledger, *kept)
    runs = ledger.child_runs()
    done = sum(1 for t in spec.trials if t.key in runs and runs[t.key].info.status == "FINISHED")
    ledger.client.set_tag(ledger.parent_id, RECOVERED_FROM_TAG, str(exp_dir))
    ledger.finish(ledger.parent_id, "FINISHED" if done == len(spec.trials) else "KILLED")
    return {**counts, "trials": len(spec.trials), "done": done}


def replay_kept(ledger, runs: list[dict], parents: list[dict]) -> int:
    """The kept records (`trials.store.kept.read_records`) logged to the store: each trial's at its
    step (a metric the run holds at that step or later is skipped), its tags and artifacts;
    then the parent's, in the order written. Returns how many records were replayed."""
    by_key = {k: r.info.run_id for k, r in ledger.child_runs().items()}
    last: dict[str, dict[str, int]] = {}
    n = 0
    for rec in runs:
        run_id = by_key.get(rec["trial_key"])
        if run_id is None:  # storage kept a record of a trial whose results it lacks
            continue
        steps = last.setdefault(run_id, ledger.last_steps(run_id))
        _replay_one(ledger, run_id, rec, steps)
        n += 1
    steps = ledger.last_steps(ledger.parent_id)
    for rec in parents:
        _replay_one(ledger, ledger.parent_id, rec, steps)
        n += 1
    return n


def _replay_one(ledger, run_id: str, rec: dict, steps: dict[str, int]) -> None:
    metrics = {k: v for k, v in rec["metrics"].items() if rec["step"] > steps.get(k, -1)}
    if metrics:
        ledger.log_metrics(run_id, metrics, rec["step"])
        steps.update({k: rec["step"] for k in metrics})
    for path, local in rec["files"].items():
        folder = path.rpartition("/")[0]
        ledger.client.log_artifact(run_id, str(local), artifact_path=folder or None)
    if rec["tags"]:
        set_tags(ledger.client, run_id, rec["tags"])
