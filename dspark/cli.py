"""`dspark train`: the thin command-line entry point over dspark.train."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from .config import Config, from_dict, parse_overrides


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
    return from_dict(values)


def cmd_train(args) -> int:
    from tqdm import tqdm

    from .train import Trainer, load_target, read_checkpoint

    cfg = build_config(args)
    # refuse a bad checkpoint or target before any work starts
    if args.resume:
        read_checkpoint(args.resume, cfg)
    if cfg.target_path:
        load_target(cfg.target_path)
    bars: dict[str, tqdm] = {}

    def progress(stage, step, total, info):
        bar = bars.get(stage)
        if bar is None:
            for b in bars.values():
                b.close()
            bar = bars[stage] = tqdm(total=total, desc=stage, unit="step", initial=step, dynamic_ncols=True)
        bar.n = step
        bar.set_postfix({k: f"{v:.3f}" for k, v in info.items()}, refresh=False)
        bar.refresh()

    def report(metrics, ckpt):
        keys = [k for k in ("val/bpb", "tf/tau", "spec/tau") if k in metrics]
        if keys:
            tqdm.write("step {:>6}: ".format(int(metrics.get("step", 0))) +
                       "  ".join(f"{k} {metrics[k]:.4f}" for k in keys))

    trainer = Trainer(cfg, report=report, progress=progress)
    print(f"corpus sha256 {trainer.data_sha256[:16]}  docs {trainer.corpus.n_docs}  "
          f"target {trainer.target_hash}  device {trainer.device}", file=sys.stderr)
    if args.resume:
        trainer.load_checkpoint(args.resume)
    final = trainer.run()
    for b in bars.values():
        b.close()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "final_metrics.json").write_text(json.dumps(final, indent=2, sort_keys=True))
    (out / "run.json").write_text(json.dumps({"config": cfg.to_dict(), "data_sha256": trainer.data_sha256,
                                              "target_hash": trainer.target_hash}, indent=2))
    if args.save_target:
        from .train import save_target

        save_target(args.save_target, trainer.target, {"target_hash": trainer.target_hash,
                                                       "data_sha256": trainer.data_sha256})
    shown = [k for k in ("val/bpb", "tf/tau", "spec/tau", "spec/tau_greedy", "spec/speedup") if k in final]
    print("final: " + "  ".join(f"{k} {final[k]:.4f}" for k in shown))
    print(f"metrics written to {out / 'final_metrics.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dspark", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train the target (or load it) and the DSpark draft head")
    t.add_argument("--config", help="YAML file of config fields")
    t.add_argument("--preset", help="tiny | small | base (overrides the file's preset)")
    t.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one config field")
    t.add_argument("--resume", metavar="CHECKPOINT_DIR", help="resume from a checkpoint directory")
    t.add_argument("--save-target", metavar="PATH", help="also save the trained target LM here")
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
    except ValueError as e:
        print(f"dspark: error: {e}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
