"""The one GPU run: the GPU figures, then the paper's question at the `base` scale, torch
alone (no Ray, no MLflow), in one command that stops by itself before its limit.

    python bench/gpu_study.py --out $OUT --minutes 9         # one H200: the base preset, cuda
    python bench/gpu_study.py --cpu --out /tmp/g --minutes 2  # the tiny preset on CPU, sized to 2 minutes
    python bench/gpu_study.py --cpu --out /tmp/g --draft-steps 6   # CI: sized by steps, whatever the clock
    python bench/gpu_study.py --target hf --out $OUT --minutes 9   # the same study on an HF target

1. `bench/gpu_check.py`'s measurements (target-stage tokens/s and MFU in bf16, drafter
   tokens/s, tau and speculative speedup sampled and greedy at batch 1), into the log.
2. `sweeps/d1-d2-d9.yaml` (drafter stage, Markov head, K = 7, D1 x D2 x D9, 2^3 cells)
   with at least 2 replicates through `trials run --local`'s runner: one shared target,
   trained once, then the trials in the spec's run order. The drafter steps are sized from
   one short probe trial (its `train/step_ms_sweep` is the time per step, the rest of its wall
   time the fixed cost of a trial), so that every trial fits in 85% of the time left.
3. `runs.parquet` (what `analysis report --parquet` reads) after every trial and
   `gpu_study.log` go to `--out`; a run cut short still leaves every finished trial.

`--target hf` drafts for a Hugging Face causal LM instead of the byte LM (dspark/hf_target.py):
on the GPU `qwen3-0.6b-shape` (Qwen3-0.6B's width, depth and heads, a 256-token vocabulary,
built from its config and trained briefly on the device as the shared target), the drafter
as wide and reading 5 decoder layers spread over its depth as DeepSpec picks them; with
`--cpu`, `qwen3-tiny`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import sys
import time
from pathlib import Path

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the repo's packages

from dspark.config import BUILT_TARGETS  # noqa: E402
from dspark.hf_target import spread_layer_ids  # noqa: E402
from trials import validate  # noqa: E402
from trials.local import bind_targets, run_local  # noqa: E402
from trials.timing.timing_settings import TimingSettings  # noqa: E402


class Log:
    """Lines to stdout and to the log file, each with the seconds since the start."""

    def __init__(self, path: Path):
        self.path, self.t0 = path, time.monotonic()

    def __call__(self, line: str) -> None:
        text = f"[{time.monotonic() - self.t0:7.1f} s] {line}"
        print(text, flush=True)
        with self.path.open("a") as f:
            f.write(text + "\n")

    def left(self, total_s: float) -> float:
        return total_s - (time.monotonic() - self.t0)


def hf_target(cpu: bool) -> dict:
    """The base fields that make the study draft for an HF target built in code."""
    name = "qwen3-tiny" if cpu else "qwen3-0.6b-shape"
    width, depth = BUILT_TARGETS[name]
    return {"target_model": name, "d_model": width, "n_layers": depth,
            "context_layers": list(spread_layer_ids(depth, 2 if cpu else 5))}


def study_spec(cpu: bool, replicates: int, draft_steps: int, overrides: dict):
    spec = validate.load_spec(ROOT / "sweeps" / "d1-d2-d9.yaml")
    base = {"draft_steps": draft_steps, "eval_interval": max(1, draft_steps // 4), "checkpoint_every_s": 1e9,
            **overrides}
    if cpu:
        base.update(preset="tiny", device="cpu", target_steps=10, spec_prompts=4, spec_new_tokens=16,
                    spec_prompt_len=16, eval_batches=1, max_corpus_bytes=300_000, spec_interval_prompts=0)
    raw = {"name": spec.name, "base": {**spec.base, **base}, "factors": spec.factors, "replicates": replicates,
           "description": spec.description, "responses": spec.responses,
           "resources": {"cpu": 1, "gpu": 0} if cpu else spec.resources}
    return validate.parse(raw)


def probe(log: Log, cpu: bool, steps: int, storage: Path, overrides: dict) -> tuple[float, float]:
    """(seconds per drafter step, fixed seconds per trial) from one trial of `steps` drafter
    steps: the step time is the trainer's own `train/step_ms_sweep`, the rest of the trial's wall
    time (evaluations, decoding, set-up) is the fixed cost."""
    spec = study_spec(cpu, 1, steps, overrides)
    one = dataclasses.replace(spec, trials=spec.trials[:1])
    t0 = time.monotonic()
    df = run_local(one, storage / "probe.parquet", storage, say=log).runs
    wall = time.monotonic() - t0
    per_step = float(df["train/step_ms_sweep"].iloc[0]) / 1000.0
    log(f"probe: {steps} drafter steps, one trial in {wall:.1f} s ({per_step * 1000:.1f} ms per step)")
    return per_step, max(wall - steps * per_step, 0.0)


def sizing(args, log: Log, total: float, n: int, per_step: float, fixed: float) -> tuple[int, float | None]:
    """(drafter steps per trial, the study's deadline): `--draft-steps` exactly, with no
    clock; else what fills the time left, capped by `--max-draft-steps` (0: none left)."""
    if args.draft_steps is not None:
        log(f"sizing: fixed at {args.draft_steps} drafter steps each for {n} trials (--draft-steps: no clock)")
        return args.draft_steps, None
    budget = 0.75 * (log.left(total) - 15.0)  # a margin for noise, the timing pass, the last write and the exit
    steps = int((budget / n - fixed) / per_step)
    if args.max_draft_steps:
        steps = min(steps, args.max_draft_steps)
    log(f"sizing: {per_step * 1000:.1f} ms per drafter step, {fixed:.1f} s fixed per trial, {budget:.0f} s for "
        f"{n} trials -> {steps} drafter steps each")
    if steps < 1:
        log("sizing: no time left for the study; stopping")
        return 0, None
    return steps, log.left(total) - 10.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for runs.parquet and gpu_study.log")
    ap.add_argument("--minutes", type=float, default=9.0, help="the whole run stops by itself within this")
    ap.add_argument("--cpu", action="store_true", help="the tiny preset on CPU (CI)")
    ap.add_argument("--replicates", type=int, default=2, help="replicate blocks (at least 2)")
    ap.add_argument("--probe-steps", type=int, help="drafter steps of the probe trial (default 100 GPU, 6 --cpu)")
    ap.add_argument("--skip-check", action="store_true", help="skip the gpu_check measurements")
    ap.add_argument("--max-draft-steps", type=int, help="at most this many drafter steps per trial (none: fill the time)")
    ap.add_argument("--draft-steps", type=int, help="exactly this many drafter steps per trial, no clock: no sizing, "
                                                    "no deadline (a test on a machine of any speed)")
    ap.add_argument("--target-steps", type=int, default=1500, help="the shared target's steps (GPU)")
    ap.add_argument("--spec-prompts", type=int, default=32, help="prompts per speculative evaluation (GPU)")
    ap.add_argument("--spec-new-tokens", type=int, default=128, help="tokens per prompt (GPU)")
    ap.add_argument("--target", choices=("byte", "hf"), default="byte",
                    help="the drafter's target: the byte LM, or an HF causal LM built in code (module docstring)")
    args = ap.parse_args(argv)
    if args.replicates < 2:
        ap.error("--replicates: at least 2 (one leaves no residual)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_study.log")
    total = 60.0 * args.minutes
    overrides = ({} if args.cpu else {"device": "cuda", "target_steps": args.target_steps, "spec_prompts":
                                      args.spec_prompts, "spec_new_tokens": args.spec_new_tokens}) | \
        (hf_target(args.cpu) if args.target == "hf" else {})
    if not args.skip_check:
        import gpu_check

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            gpu_check.main(["--cpu", "--target-steps", "10", "--draft-steps", "10"] if args.cpu else [])
        for line in buf.getvalue().splitlines():
            log(f"gpu_check: {line}")
    if args.draft_steps is not None and args.draft_steps < 1:
        ap.error("--draft-steps: at least 1")
    storage = out / "storage"
    t0 = time.monotonic()
    bind_targets(study_spec(args.cpu, args.replicates, 1, overrides), storage, log)
    log(f"shared target ready in {time.monotonic() - t0:.1f} s")
    per_step, fixed = probe(log, args.cpu, args.probe_steps or (6 if args.cpu else 100), storage, overrides)
    n = len(study_spec(args.cpu, args.replicates, 1, overrides).trials)
    steps, deadline = sizing(args, log, total, n, per_step, fixed)
    if steps < 1:
        return 1
    spec = study_spec(args.cpu, args.replicates, steps, overrides)
    df = run_local(spec, out / "runs.parquet", storage, deadline_s=deadline, say=log,
                   timing=TimingSettings(rounds=3, prompts=2) if args.cpu else TimingSettings(rounds=5, prompts=8)).runs
    log(f"gpu_study: done, {len(df)} of {n} trials in {out / 'runs.parquet'}")
    return 0 if len(df) == n else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_check beside this file
    sys.exit(main())
