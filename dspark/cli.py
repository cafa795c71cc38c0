"""`dspark train`: the thin command-line entry point over dspark.train."""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import time
from dataclasses import fields
from pathlib import Path

import yaml

from .config import PRESETS, Config, from_dict, parse_overrides
from .metrics import DEFAULT_RESPONSES, HEADLINE
from trials.store.client import absolute_uri, run_command
from trials.store.ui import ui_url
from trials.store.runs import TrainRun, git_commit
from trials.store.items import encode as item_columns
from trials.store.probe import probe_store


def load_config_file(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--config: {path} is not a file")
    data = yaml.safe_load(p.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"--config: {path} must hold a mapping of config fields")
    return data


def build_config(args) -> Config:
    values: dict = {}
    if args.config:
        values.update(load_config_file(args.config))
    if args.preset:
        values["preset"] = args.preset
    values.update(parse_overrides(args.set or []))
    if "out_dir" not in values:
        values["out_dir"] = fresh_out_dir(Path("runs"), values.get("preset", Config.preset))
    return from_dict(values)


def fresh_out_dir(root: Path, preset: str) -> str:
    """A new folder per run (`runs/<preset>-<date>-<time>`), so the next run overwrites nothing."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, i = root / f"{preset}-{stamp}", 1
    while path.exists():
        i += 1
        path = root / f"{preset}-{stamp}-{i}"
    return str(path)


class Console:
    """Progress bars per phase (target, draft, and the final evaluation's phases) and one
    line per evaluation, each printed once."""

    def __init__(self):
        from tqdm import tqdm

        self.tqdm = tqdm
        self.bar = None
        self.phase = None
        self.printed: set[tuple[int, str]] = set()

    def progress(self, phase: str, step: int, total: int, info: dict) -> None:
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.bar = self.tqdm(total=total, desc=phase, unit="step" if phase in ("target", "draft", "joint")
                                 else "prompt", initial=step, dynamic_ncols=True)
        self.bar.n = step
        self.bar.set_postfix({k: f"{v:.3f}" for k, v in info.items()}, refresh=False)
        self.bar.refresh()

    def report(self, metrics: dict, checkpoint) -> None:
        step = int(metrics.get("step", 0))
        keys = [k for k in HEADLINE if k in metrics and (step, k) not in self.printed]
        if keys:
            self.printed.update((step, k) for k in keys)
            self.tqdm.write(f"step {step:>6}: " + "  ".join(f"{k} {metrics[k]:.4f}" for k in keys))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _write_run_files(trainer, final: dict, save_target_to: str | None) -> Path:
    """final_metrics.json and run.json in the run's folder, and the target where asked."""
    cfg = trainer.cfg
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "final_metrics.json").write_text(json.dumps(final, indent=2, sort_keys=True))
    (out / "run.json").write_text(json.dumps({"config": cfg.to_dict(), "data_sha256": trainer.data_sha256,
                                              "target_hash": trainer.target_hash}, indent=2))
    if save_target_to:
        from .train import save_target

        save_target(save_target_to, trainer.target, {"target_hash": trainer.target_hash,
                                                     "data_sha256": trainer.data_sha256})
    return out


def refuse_bad_inputs(args, cfg: Config) -> None:
    """A checkpoint to resume from that this config cannot resume, or a target_path that
    holds no target, refused in one line."""
    from .checkpoint import read_checkpoint
    from .targets import load_target

    if args.resume:
        read_checkpoint(args.resume, cfg)
    if cfg.target_path:
        load_target(cfg.target_path)


def cmd_train(args) -> int:
    from .train import Trainer

    cfg = build_config(args)
    # refuse a bad checkpoint, target or store before any work starts
    refuse_bad_inputs(args, cfg)
    uri = absolute_uri(args.tracking_uri) if args.tracking_uri else None
    if uri:
        probe_store(uri, writable=True)
    console = Console()
    tracked = None

    def report(metrics, ckpt, items=None):
        console.report(metrics, ckpt)
        if tracked is not None:  # the items go to the run's items.json, as a sweep's trial's do
            tracked.log({**metrics, **item_columns(items or {}, metrics)}, int(metrics.get("step", 0)))

    trainer = Trainer(cfg, report=report, progress=console.progress)
    print(f"corpus sha256 {trainer.data_sha256[:16]}  docs {trainer.corpus.n_docs}  "
          f"target {trainer.target_hash}  device {trainer.device}  out {cfg.out_dir}", file=sys.stderr)
    if uri:
        tracked = TrainRun(uri, args.experiment, args.run_name or Path(cfg.out_dir).name, cfg.to_dict(),
                           {"seed": str(cfg.seed), "target_hash": trainer.target_hash,
                            "data_sha256": trainer.data_sha256, "git_commit": git_commit()})
    if args.resume:
        trainer.load_checkpoint(args.resume)
    try:
        final = trainer.run()
    except BaseException as e:
        console.close()
        if tracked is not None:
            tracked.finish("KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED", error=repr(e))
        raise
    console.close()
    out = _write_run_files(trainer, final, args.save_target)
    shown = [k for k in (*HEADLINE, *DEFAULT_RESPONSES["drafter"]) if k in final]
    shown = list(dict.fromkeys(shown))
    print("final: " + "  ".join(f"{k} {final[k]:.4f}" for k in shown))
    print(f"metrics written to {out / 'final_metrics.json'}")
    if tracked is not None:
        tracked.finish("FINISHED", final, out / "artifacts")
        print(f"MLflow run {tracked.run_id} in experiment {args.experiment!r}: {ui_url(tracked.experiment_id)}")
    return 0


def config_fields_help() -> str:
    """Every config field with its default and its comment in `dspark/config.py`."""
    notes = {}
    for line in inspect.getsource(Config).splitlines():
        m = re.match(r"\s+(\w+): [^=]+=.*?#\s*(.+)$", line)
        if m:
            notes[m.group(1)] = m.group(2)
    rows = [f"  {f.name} = {getattr(Config, f.name, '')!r}" + (f"  ({notes[f.name]})" if f.name in notes else "")
            for f in fields(Config)]
    return ("config fields (--set NAME=VALUE; defaults are the tiny preset's; presets: "
            f"{', '.join(PRESETS)}):\n" + "\n".join(rows))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dspark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the target (or load it) and the DSpark draft head",
                       epilog=config_fields_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--config", help="YAML file of config fields (default: none)")
    t.add_argument("--preset", choices=list(PRESETS), help="named preset (overrides the file's preset; default: tiny)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override one config field (repeatable; the fields are listed below; default: none)")
    t.add_argument("--resume", metavar="CHECKPOINT_DIR", help="resume from a checkpoint directory (default: none)")
    t.add_argument("--save-target", metavar="PATH", help="also save the trained target LM here (default: none)")
    t.add_argument("--tracking-uri", help="also record the run in this MLflow store, named and tagged as a "
                   "sweep's trial (e.g. sqlite:///mlflow.db; default: not tracked)")
    t.add_argument("--experiment", default="dspark-train", help="MLflow experiment (default: dspark-train)")
    t.add_argument("--run-name", help="MLflow run name (default: the out_dir's name)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "train":
        return 1
    return run_command("dspark", lambda: cmd_train(args), getattr(args, "tracking_uri", None))


if __name__ == "__main__":
    sys.exit(main())
