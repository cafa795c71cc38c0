"""One GPU check that needs torch alone (no Ray, no MLflow): the `base` preset's target and
drafter stages for a few hundred steps in bf16, then speculative decoding. Prints tokens/s,
MFU against the device's bf16 peak, tau and the speedup, sampled and greedy; and writes the
target's verify-step SPS table (`--sps-table`, default bench/out/gpu_check/sps_table.json):
a JSON object {"<batch_tokens>": steps_per_second, ..., "meta": {...}}, which a run reads
with `sched_curve: table:<path>` (dspark.curves).

    python bench/gpu_check.py                 # CUDA, the base preset (about 5 minutes on one H200)
    python bench/gpu_check.py --cpu           # CI: the tiny preset on CPU, a few steps, so it cannot rot

MFU counts 6 N FLOPs per trained token for the N weights that train (plus the attention
scores, 12 L T D per token for L layers of width D over T positions) and divides by the
peak: the bf16 dense peak of a known device (H100/H200: 989 TFLOP/s), `--peak-tflops`, or
on CPU a measured fp32 matmul peak.
"""

from __future__ import annotations

import argparse
import time

import dspark  # noqa: F401  (before torch, so that MKL reads its reproducible mode)
import torch

from dspark.config import from_dict
from dspark.curves import measure_grid, write_sps_table
from dspark.model import sync
from dspark.schedule import measure_sps
from dspark.speculative_eval import decode_set, prompts_from
from dspark.train import Trainer

KNOWN_PEAKS_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}


def peak_tflops(device: torch.device, given: float | None) -> tuple[float, str]:
    if given:
        return given, "given"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, peak in KNOWN_PEAKS_TFLOPS.items():
            if key in name:
                return peak, f"{name} bf16 dense spec"
        return float("nan"), f"{name}: unknown peak (pass --peak-tflops)"
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    a @ b
    t0, n = time.perf_counter(), 8
    for _ in range(n):
        a @ b
    return 2 * 1024 ** 3 * n / (time.perf_counter() - t0) / 1e12, "measured fp32 matmul on this CPU"


def flops_per_token(n_params: int, n_layers: int, seq_len: int, d_model: int) -> float:
    return 6.0 * n_params + 12.0 * n_layers * seq_len * d_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="the tiny preset on CPU, a few steps (CI)")
    ap.add_argument("--target-steps", type=int, help="default: 300 (GPU), 20 (--cpu)")
    ap.add_argument("--draft-steps", type=int, help="default: 300 (GPU), 20 (--cpu)")
    ap.add_argument("--prompts", type=int, help="speculative decoding prompts (default: 32 GPU, 2 --cpu)")
    ap.add_argument("--peak-tflops", type=float, help="the device's peak for MFU (default: known or measured)")
    ap.add_argument("--sps-table", help="where to write the SPS table (default: bench/out/gpu_check/sps_table.json)")
    args = ap.parse_args(argv)
    if args.cpu:
        values = dict(preset="tiny", device="cpu", target_steps=args.target_steps or 20,
                      draft_steps=args.draft_steps or 20, eval_interval=10, max_corpus_bytes=300_000,
                      spec_prompts=args.prompts or 2, spec_new_tokens=16, spec_prompt_len=16)
    else:
        if not torch.cuda.is_available():
            print("gpu_check: no CUDA device here; run with --cpu for the CPU check")
            return 2
        values = dict(preset="base", device="cuda", target_steps=args.target_steps or 300,
                      draft_steps=args.draft_steps or 300, eval_interval=100, spec_prompts=args.prompts or 32)
    cfg = from_dict({**values, "out_dir": "bench/out/gpu_check"})
    t = Trainer(cfg)
    dev = t.device
    peak, peak_src = peak_tflops(dev, args.peak_tflops)
    tokens = cfg.batch_size * cfg.seq_len
    print(f"device {dev} ({torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'}), preset {cfg.preset}, "
          f"{cfg.precision}, d={cfg.d_model} L={cfg.n_layers} batch={cfg.batch_size}x{cfg.seq_len}; "
          f"peak {peak:.4g} TFLOP/s ({peak_src})")

    target_stage(t, peak)
    t.start_draft()
    sync(dev)
    t0 = time.perf_counter()
    t.train_head()
    sync(dev)
    draft_s = time.perf_counter() - t0
    last = next(h for h in reversed(t.history) if "tf/tau" in h)
    print(f"draft stage: {cfg.draft_steps} steps (evaluations included), {cfg.draft_steps * tokens / draft_s:,.0f} "
          f"tokens/s, tf/tau {last['tf/tau']:.3f}")

    speculative(t)
    sps_table(t, args.sps_table or f"{cfg.out_dir}/sps_table.json")
    print("gpu_check: done")
    return 0


def target_stage(t: Trainer, peak: float) -> None:
    """The target stage, timed: tokens per second and MFU against `peak` TFLOP/s."""
    cfg, dev = t.cfg, t.device
    sync(dev)
    t0 = time.perf_counter()
    t.train_target()
    sync(dev)
    target_s = time.perf_counter() - t0
    n_target = sum(p.numel() for p in t.target.parameters())
    tps = cfg.target_steps * cfg.batch_size * cfg.seq_len / target_s
    mfu = tps * flops_per_token(n_target, cfg.n_layers, cfg.seq_len, cfg.d_model) / (peak * 1e12)
    bpb = next((h["val/bpb"] for h in reversed(t.history) if "val/bpb" in h), float("nan"))
    print(f"target stage: {cfg.target_steps} steps, {tps:,.0f} tokens/s, MFU {100 * mfu:.1f}%, val/bpb {bpb:.3f}")


def speculative(t: Trainer) -> None:
    """tau and speedup against autoregressive decoding, sampled and greedy."""
    cfg = t.cfg
    for m in (t.target, t.drafter, t.head):
        m.eval()
    prompts = prompts_from(t.corpus.val, cfg.spec_prompts, cfg.spec_prompt_len)
    n_timed = min(len(prompts), 8)
    for temperature, label in ((1.0, "sampled"), (0.0, "greedy")):
        stats, _, spec_s, ar_s = decode_set(t.models, prompts, cfg.spec_new_tokens,
                                            temperature, t.device, n_timed)
        tau = sum(a + 1 for a in stats.accepted) / len(stats.accepted)
        print(f"speculative {label}: tau {tau:.3f}, speedup {sum(ar_s) / sum(spec_s):.2f}x against autoregressive "
              f"({n_timed} prompts x {cfg.spec_new_tokens} tokens, batch 1)")


def sps_table(t: Trainer, path: str, requests: int = 64) -> None:
    """The target's verify steps per second for B-token steps, B up to `requests` requests
    verifying every slot, as Algorithm 1's capacity curve (`sched_curve: table:<path>`)."""
    cfg = t.cfg
    sizes = measure_grid(requests * (cfg.block_size + 1))
    table = measure_sps(t.target, sizes, cfg.spec_prompt_len)
    dev = t.device
    meta = {"what": "verify steps per second of the target by batch size in tokens (bench/gpu_check.py)",
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "preset": cfg.preset,
            "d_model": cfg.d_model, "n_layers": cfg.n_layers,
            "params": sum(p.numel() for p in t.target.parameters()),
            "dtype": str(next(t.target.parameters()).dtype), "context_len": cfg.spec_prompt_len,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    out = write_sps_table(path, table, meta)
    print(f"sps table: {len(table)} batch sizes {sizes[0]}..{sizes[-1]}, SPS {table[sizes[0]]:.4g} -> "
          f"{table[sizes[-1]]:.4g} steps/s, written to {out}")


if __name__ == "__main__":
    raise SystemExit(main())
