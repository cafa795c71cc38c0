"""`trials run SPEC --local --out runs.parquet`: a sweep's design on one machine with
torch alone, for machines without Ray or MLflow (a lent GPU box).

The same spec parsing, design, seeds and run order as `trials run`, the same trainer, one
shared target per target address (trained once into `<storage>/targets/`, or reused),
and trials one after another in run order. Each finished trial is written to the parquet
at once (atomically), in the format `analysis report --parquet` reads (what `analysis
export` writes from MLflow: factors, replicate, run order, every final metric, the spec's
margins), so a run stopped part way still counts, and a rerun with the same `--out` skips
the trials already in it. `deadline_s` stops before a trial that would not finish in the
time left (estimated from the trials so far). Once every trial is in, the sweep's timed
responses (the registry's `timed` rows) come from the same interleaved timing pass
`trials time` runs (`trials.timing.timing_pass.pass_rounds`, here in this process), over each trial's
final checkpoint, kept under `<storage>/<sweep>/local/`; a rerun with every trial timed does
not time them again. Imports neither Ray nor MLflow.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from trials.registry import recorded, results_problem
from trials.store.items import encode_each
from trials.store.keys import ERROR_TAG
from trials.store.runs import config_params

from trials.driver import shared_artifacts
from trials.spec import SweepSpec
from .sweep_record import SweepRecord
from .export import SweepFrame, finished_frame, read_parquet, run_row, to_parquet
from trials.timing.timing_pass import pass_rounds, sweep_stage
from trials.timing.timing_settings import TimingSettings
from .workload_defaults import TrainContext

DEFAULT_TIMING = TimingSettings()  # the timing pass after the trials (None: none)


def run_local(spec: SweepSpec, out: str | Path, storage: str | Path = "ray_results", deadline_s: float | None = None,
              say=print, timing=DEFAULT_TIMING) -> SweepFrame:
    """Run the spec's trials in run order, writing `out` after each; returns the frame."""
    out = Path(out)
    if out.is_dir() or not out.parent.is_dir():
        raise ValueError(f"--out: {out} must be a file in an existing folder")
    started = time.monotonic()
    rows = _rows_done(read_parquet(out), spec) if out.is_file() else {}
    configs = bind_targets(spec, Path(storage), say)
    took: list[float] = []
    for t in spec.trials:
        if t.key in rows:
            continue
        if deadline_s is not None and took:
            left = deadline_s - (time.monotonic() - started)
            if left < max(took):
                say(f"{spec.name}: stopping before {t.run_name}: {left:.0f} s left, a trial took up to {max(took):.0f} s")
                break
        t0 = time.perf_counter()
        rows[t.key] = _train_one(spec, t, configs[t.key], Path(storage))
        took.append(time.perf_counter() - t0)
        _write(spec, list(rows.values()), out)
        say(f"{spec.name}: {len(rows)}/{len(spec.trials)} {t.run_name} in {took[-1]:.0f} s")
    if len(rows) == len(spec.trials) and timing is not None and spec.wl.has("timing"):
        time_locally(spec, rows, configs, timing, say)
        _write(spec, list(rows.values()), out)
    return _frame(spec, list(rows.values())) if rows else SweepFrame(pd.DataFrame())


def time_locally(spec: SweepSpec, rows: dict, configs: dict, settings, say=print) -> None:
    """The interleaved timing pass over the finished trials, in this process: each row gets
    the timed response and the pass's size (`timing/rounds`, `timing/prompts|steps`), as
    `trials time` logs them. Rows already timed by a pass with these settings are kept."""
    from dataclasses import asdict

    stage, hooks = sweep_stage(spec), spec.wl.timing
    size = hooks.size[stage]
    if all(r["metrics"].get("timing/rounds") == settings.rounds for r in rows.values()):
        return
    checkpoints = {k: r.get("checkpoint", "") for k, r in rows.items()}
    if hooks.needs_checkpoints(stage) and not all(Path(c).is_dir() for c in checkpoints.values()):
        say(f"{spec.name}: not timed: a trial's checkpoint is gone from {Path(next(iter(checkpoints.values()))).parent}")
        return
    say(f"{spec.name}: timing {len(rows)} run(s) ({hooks.response[stage]}): {settings.rounds} interleaved rounds")
    stream = pass_rounds(spec.wl, stage, {k: configs[k].to_dict() for k in rows}, checkpoints, asdict(settings),
                         max(1, int(spec.resources.get("cpu", 1))))
    rounds = [item for item in stream if "round" in item]
    jack = encode_each(hooks.items(stage, rounds))
    for key, value in hooks.values(stage, rounds).items():
        rows[key]["metrics"].update({hooks.response[stage]: value, "timing/rounds": float(settings.rounds),
                                     f"timing/{size}": float(getattr(settings, size)), **jack.get(key, {})})


def bind_targets(spec: SweepSpec, storage: Path, say=print) -> dict:
    """trial key -> its config, pointing at its shared artifact (trained here once if absent)."""
    art, found = spec.wl.shared, shared_artifacts.addresses(spec)
    paths = shared_artifacts.in_storage(spec, storage, found)
    for h, cfg in shared_artifacts.needed(spec, found).items():
        if h not in paths:
            say(f"{spec.name}: training the shared target {h}")
            path = art.file(storage, h)
            path.parent.mkdir(parents=True, exist_ok=True)
            art.train(cfg.to_dict(), str(path))
            paths[h] = str(path)
    return {t.key: t.config for t in shared_artifacts.bound(spec, found, paths)[0].trials}


def _train_one(spec: SweepSpec, t, cfg, storage: Path) -> dict:
    """One trial in this process, as a Ray trial runs it: the workload's `train` with a
    `report` (its metrics kept, the last value of each), its results checked when it ends
    (`results_problem`: a FAILED row names the metric), the final checkpoint kept where the
    workload has checkpoints (for the timing pass)."""
    import shutil

    try:
        import torch

        torch.set_num_threads(max(1, int(spec.resources.get("cpu", 1))))  # as a Ray trial would: the same numbers
    except ImportError:  # a workload of another framework
        pass
    t0 = time.time()
    keep = storage / spec.name / "local" / t.key.replace("|", "_").replace("=", "-").replace("#", "_")
    seen: dict = {}

    def report(metrics: dict, checkpoint_dir: str | None = None) -> None:
        seen.update(metrics)

    status, error = "FINISHED", ""
    with tempfile.TemporaryDirectory(prefix=f"{spec.wl.name}-local-") as tmp:
        final = spec.wl.train(cfg.replace(out_dir=tmp), TrainContext(report)) or {}
        seen.update(final)
        problem = results_problem(seen, list(spec.responses), spec.wl.registry.is_timed)
        if problem:
            status, error = "FAILED", f"run {t.run_name}: {problem}"
        final_dir = Path(tmp) / spec.wl.final_checkpoint if spec.wl.final_checkpoint else None
        if final_dir is not None and final_dir.is_dir():
            if keep.exists():
                shutil.rmtree(keep)
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(final_dir, keep)  # the final checkpoint, for the timing pass
    numbers = {k: v for k, v in seen.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"run_id": f"local-{t.key}", "run_name": t.run_name, "status": status,
            "tags": {**t.tags, **({ERROR_TAG: error} if error else {})},
            "params": config_params(t.config.to_dict()), "metrics": numbers, "run_s": time.time() - t0,
            "checkpoint": str(keep) if keep.exists() else ""}


def _rows_done(sweep: SweepFrame, spec: SweepSpec) -> dict:
    """The trials an earlier run of the same sweep already wrote (kept as rows to rewrite)."""
    held = sweep.record.experiment
    if held != spec.name:
        raise ValueError(f"--out: it holds sweep {held!r}, not {spec.name!r}")
    keys = {t.key: t for t in spec.trials}
    done = {}
    for rec in sweep.local_rows:
        if rec["tags"].get("trial_key") in keys and rec.get("status", "FINISHED") == "FINISHED":  # a failed one reruns
            done[rec["tags"]["trial_key"]] = rec
    for key, rec in done.items():  # a spec edited since: its finished rows are another sweep's (as a Ray resume refuses)
        now = config_params(keys[key].config.to_dict())
        changed = sorted(k for k in set(now) | set(rec.get("params", {})) if now.get(k) != rec["params"].get(k))
        if changed:
            k = changed[0]
            raise ValueError(f"--out: {rec['run_name']} in it ran with {k} {rec['params'].get(k, '(unset)')}, the spec "
                             f"now gives {now.get(k, '(unset)')} ({len(changed)} setting(s) differ): an edited spec is "
                             "a new sweep; write it to another --out, or rerun the spec as it was")
    return done


def _frame(spec: SweepSpec, rows: list[dict]) -> SweepFrame:
    order = {f: list(levels) for f, levels in spec.factors.items()}
    flat = []
    for r in rows:
        row = run_row(r["run_id"], r["run_name"], r["status"], r["tags"], r["params"], r["metrics"])
        if r["status"] != "FINISHED":
            row["error"] = r["tags"].get(ERROR_TAG, "")
        flat.append({**row, "run_s": r["run_s"]})
    record = replace(SweepRecord.of_spec(spec, recorded(spec.wl.registry, [c for r in rows for c in r["metrics"]])),
                     declared_plan="")
    # the rows as a parquet export gives them back (plain JSON data): what a rerun resumes from
    return replace(finished_frame(pd.DataFrame(flat), order), record=record, local_rows=json.loads(json.dumps(rows)))


def _write(spec: SweepSpec, rows: list[dict], out: Path) -> None:
    tmp = out.with_name(out.name + ".tmp")
    to_parquet(_frame(spec, rows), tmp)
    tmp.replace(out)  # a reader never sees half a file
