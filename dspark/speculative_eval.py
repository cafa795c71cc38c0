"""The speculative-decoding responses of a drafter-stage run (README, "Responses").

On fixed held-out prompts and fixed decoding seeds (the same for every arm): accepted
length per round at temperature 1 and greedy, conditional acceptance per slot, wall-clock
speedup against autoregressive decoding of the same target measured in this process,
calibration of prod c_k against the prefix actually accepted (raw, and after STS fitted on
the calibration split), a static-threshold sweep and Algorithm 1 over concurrent requests.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import calibration
from .artifacts import decoding_artifacts
from .metrics import split_name
from .data import fixed_batches
from .schedule import load_or_measure_sps, prefix_schedule, sps_lookup
from .model import sync
from .speculate import RoundStats, autoregressive, generate

THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
PROMPT_SUBSETS = 4  # disjoint prompt groups (prompt i in group i mod 4), for the evaluation's own variance
PER_PROMPT_FILE = "per_prompt.json"
CONCURRENT_REQUESTS = 4
SPEEDUP_PROMPTS = 16  # prompts decoded both ways for the wall-clock speedup
DECODE_SEED = 20260706  # the same decoding seeds for every arm and replicate


def sps_cache_path() -> Path:
    """Where measured SPS tables live (one per machine, keyed inside by target shape and
    device): $DSPARK_CACHE or ~/.cache/dspark."""
    root = os.environ.get("DSPARK_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dspark")
    return Path(root) / "sps_table.json"


def prompts_from(stream: torch.Tensor, n: int, length: int) -> list[torch.Tensor]:
    return [p[None] for p in fixed_batches(stream, 1, n, length)[0]]


def _generator(device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def decode_set(target, drafter, head, prompts, new_tokens: int, temperature: float, device, n_timed: int = 0,
               progress: Callable[[int, int], None] | None = None):
    """Speculative decoding of every prompt; on the first `n_timed` prompts autoregressive
    decoding too, interleaved so both see the same machine state. Returns (stats,
    per-prompt tau, spec seconds and AR seconds per timed prompt). `progress` hears
    (prompts done, prompts)."""
    stats = RoundStats()
    taus, spec_s, ar_s = [], [], []
    for i, prompt in enumerate(prompts):
        prompt = prompt.to(device)
        timed = i < n_timed
        if timed:
            t0 = time.perf_counter()
            autoregressive(target, prompt, new_tokens, temperature, _generator(device, DECODE_SEED + i))
            sync(device)
            ar_s.append(time.perf_counter() - t0)
        before = len(stats.accepted)
        t0 = time.perf_counter()
        generate(target, drafter, head, prompt, new_tokens, temperature, _generator(device, DECODE_SEED + i), stats)
        sync(device)
        if timed:
            spec_s.append(time.perf_counter() - t0)
        rounds = stats.accepted[before:]
        stats.prompt_rounds.append(len(rounds))
        taus.append(float(np.mean([n + 1 for n in rounds])))
        if progress is not None:
            progress(i + 1, len(prompts))
    return stats, taus, spec_s, ar_s


def accept_at(accepted: list[int], K: int) -> list[float]:
    """Conditional acceptance of slot k given slots 1..k-1 accepted (paper Fig 2)."""
    acc = np.asarray(accepted)
    out = []
    for k in range(1, K + 1):
        reached = (acc >= k - 1).sum()
        out.append(float((acc >= k).sum() / reached) if reached else float("nan"))
    return out


def accept_rate_at(accepted: list[int], K: int) -> list[float]:
    """Unconditional acceptance of slot k: the fraction of all rounds in which slots 1..k
    were all accepted (DeepSpec's per-position accept rate)."""
    acc = np.asarray(accepted)
    return [float((acc >= k).mean()) if acc.size else float("nan") for k in range(1, K + 1)]


def static_threshold_lengths(conf: np.ndarray, t: float) -> np.ndarray:
    """DeepSpec's static rule: verify up to (not including) the first slot whose raw c_k
    falls below t. conf (N, K) -> lengths (N,)."""
    below = conf < t
    return np.where(below.any(axis=1), below.argmax(axis=1), conf.shape[1])


def _survival(stats: RoundStats, K: int):
    conf = torch.stack(stats.conf).numpy().astype(np.float64)  # (N, K)
    acc = np.asarray(stats.accepted)
    survived = (acc[:, None] >= np.arange(1, K + 1)[None, :]).astype(np.float64)
    return conf, survived, acc


Progress = Callable[[str, int, int], None]  # (phase, done, total)


def evaluate_speculative(target, drafter, head, corpus, cfg, device, out_dir: Path | None,
                         n_prompts: int | None = None, full: bool = True, progress: Progress | None = None) -> dict:
    """All speculative responses; artifacts (histogram, reliability diagram, SPS table)
    go to out_dir/artifacts when `full`. `progress` hears each phase's prompts."""
    K = cfg.block_size
    n = n_prompts or cfg.spec_prompts
    for m in (target, drafter, head):
        m.eval()
    val_prompts = prompts_from(corpus.val, n, cfg.spec_prompt_len)
    n_timed = min(n, SPEEDUP_PROMPTS) if full else 0

    def decode(phase, prompts, temperature, timed):
        hook = None if progress is None else (lambda i, total: progress(phase, i, total))
        return decode_set(target, drafter, head, prompts, cfg.spec_new_tokens, temperature, device, timed, hook)

    t_start = time.perf_counter()
    stats, taus, spec_s, ar_s = decode("decode (sampled)", val_prompts, 1.0, n_timed)
    m = acceptance_metrics(stats.accepted, taus, K)
    if not full:
        return m
    m.update(timing_metrics(stats, sum(spec_s), sum(ar_s), n_timed * cfg.spec_new_tokens))
    g_stats, g_taus, g_spec_s, g_ar_s = decode("decode (greedy)", val_prompts, 0.0, n_timed)
    m["spec/tau_greedy"] = float(np.mean([a + 1 for a in g_stats.accepted]))
    m["spec/speedup_greedy"] = sum(g_ar_s) / sum(g_spec_s)

    conf, survived, acc = _survival(stats, K)
    cal_stats, *_ = decode("calibrate (STS)", prompts_from(corpus.calib, n, cfg.spec_prompt_len), 1.0, 0)
    conf_sts, temps, cal = calibrate(conf, survived, *_survival(cal_stats, K)[:2])
    m.update(cal)
    m.update(threshold_sweep(conf, conf_sts, acc))
    sizes = list(range(CONCURRENT_REQUESTS, CONCURRENT_REQUESTS * (K + 1) + 1))
    sps = load_or_measure_sps(target, sps_cache_path(), sizes, cfg.spec_prompt_len)
    m.update(algorithm1(conf_sts, acc, sps, CONCURRENT_REQUESTS))
    per_prompt = prompt_statistics(stats, taus, g_taus, spec_s, ar_s, conf, survived, n,
                                   decode_s=time.perf_counter() - t_start)
    m.update(split_metrics(per_prompt))
    if out_dir is not None:
        decoding_artifacts(Path(out_dir) / "artifacts", acc, K, conf, conf_sts, survived, temps, sps)
        (Path(out_dir) / "artifacts" / PER_PROMPT_FILE).write_text(json.dumps(per_prompt))
    return m


def split_metrics(per_prompt: dict) -> dict[str, float]:
    """The prompt-group values as metrics (`split/spec/tau@g0`, ...), with the prompt count
    and the decoding seconds per prompt, so the store and its parquet export carry them."""
    m = {"split/prompts": float(per_prompt["spec_prompts"]),
         "split/decode_s_per_prompt": float(per_prompt["decode_s_per_prompt"])}
    for name, values in per_prompt["subsets"].items():
        for g, v in enumerate(values):
            m[split_name(name, g)] = float(v)
    return m


def prompt_statistics(stats: RoundStats, taus, g_taus, spec_s, ar_s, conf, survived, n_prompts: int,
                      decode_s: float) -> dict:
    """What the analysis needs to tell the evaluation's own noise from the seeds': per
    prompt, tau (sampled and greedy) and the timed prompts' seconds; and every
    prompt-derived primary response recomputed on each of PROMPT_SUBSETS disjoint prompt
    groups (prompt i in group i mod G; every run decodes the same prompts, so group g is
    the same prompts in every run)."""
    owner = np.repeat(np.arange(len(taus)), stats.prompt_rounds) if stats.prompt_rounds else np.zeros(0, int)
    subsets: dict[str, list[float]] = {k: [] for k in ("spec/tau", "spec/tau_greedy", "spec/speedup",
                                                        "conf/ece_mean", "conf/auroc_mean", "conf/brier_mean")}
    acc = np.asarray(stats.accepted)
    G = PROMPT_SUBSETS
    for g in range(G):
        rounds = owner % G == g
        timed = [i for i in range(len(spec_s)) if i % G == g]
        subsets["spec/tau"].append(float(np.mean(acc[rounds] + 1)) if rounds.any() else float("nan"))
        subsets["spec/tau_greedy"].append(float(np.mean([g_taus[i] for i in range(g, len(g_taus), G)]))
                                          if len(g_taus) > g else float("nan"))
        subsets["spec/speedup"].append(float(sum(ar_s[i] for i in timed) / sum(spec_s[i] for i in timed))
                                       if timed else float("nan"))
        cal = calibration.prefix_metrics(conf[rounds], survived[rounds], np.ones_like(survived[rounds], bool),
                                         "conf/") if rounds.any() else {}
        for k in ("conf/ece_mean", "conf/auroc_mean", "conf/brier_mean"):
            subsets[k].append(float(cal.get(k, float("nan"))))
    return {"spec_prompts": n_prompts, "groups": G, "tau": list(map(float, taus)),
            "tau_greedy": list(map(float, g_taus)), "spec_s": spec_s, "ar_s": ar_s,
            "decode_s_per_prompt": decode_s / max(1, n_prompts), "subsets": subsets}


def acceptance_metrics(accepted: list[int], taus: list[float], K: int) -> dict[str, float]:
    """Mean tokens per round (+ its standard error and 10th percentile over prompts) and
    acceptance per slot."""
    m = {"spec/tau": float(np.mean([a + 1 for a in accepted])),
         "spec/tau_se": float(np.std(taus, ddof=1) / math.sqrt(len(taus))) if len(taus) > 1 else float("nan"),
         "spec/tau_p10": float(np.percentile(taus, 10)) if len(taus) else float("nan")}
    for k, v in enumerate(accept_at(accepted, K), start=1):
        m[f"spec/accept@{k}"] = v
    for k, v in enumerate(accept_rate_at(accepted, K), start=1):
        m[f"spec/accept_rate@{k}"] = v
    return m


def timing_metrics(stats: RoundStats, spec_s: float, ar_s: float, timed_tokens: int) -> dict[str, float]:
    """Wall-clock speedup against autoregressive decoding, and a round's parts."""
    rounds = len(stats.accepted)
    return {"spec/speedup_sweep": ar_s / spec_s, "spec/tokens_per_s": timed_tokens / spec_s,
            "spec/ar_tokens_per_s": timed_tokens / ar_s, "spec/draft_ms": stats.draft_ms / rounds,
            "spec/seq_ms": stats.seq_ms / rounds, "spec/verify_ms": stats.verify_ms / rounds,
            "spec/round_ms": stats.total_ms / rounds, "spec/seq_frac": stats.seq_ms / stats.total_ms}


def calibrate(conf, survived, cal_conf, cal_survived):
    """Raw calibration on the validation rounds, and after STS fitted on the calibration
    split's rounds. Returns (calibrated conf, temperatures, metrics)."""
    valid = np.ones_like(survived, dtype=bool)
    m = calibration.prefix_metrics(conf, survived, valid, "conf/")
    temps = calibration.fit_sts(cal_conf, cal_survived)
    conf_sts = calibration.apply_sts(conf, temps)
    sts = calibration.prefix_metrics(conf_sts, survived, valid, "conf/")
    m.update({(k.replace("@", "_sts@") if "@" in k else k + "_sts"): v for k, v in sts.items()})
    return conf_sts, temps, m


def threshold_sweep(conf, conf_sts, acc) -> dict[str, float]:
    """Verified and accepted lengths per threshold: the paper's rule on the calibrated
    cumulative product (Fig 5), and DeepSpec's static rule on the raw per-slot c_k."""
    m = {}
    cum = np.cumprod(conf_sts, axis=1)
    for t in THRESHOLDS:
        l = (cum >= t).sum(axis=1)  # cum is non-increasing, so this is the surviving prefix length
        m[f"sched/verified@{t}"] = float(l.mean())
        m[f"sched/accepted@{t}"] = float(np.minimum(acc, l).mean())
        ls = static_threshold_lengths(conf, t)
        m[f"sched/static_verified@{t}"] = float(ls.mean())
        m[f"sched/static_accepted@{t}"] = float(np.minimum(acc, ls).mean())
    return m


def algorithm1(conf_sts, acc, sps: dict[int, float], R: int) -> dict[str, float]:
    """Algorithm 1 over batches of R concurrent requests, driven by a measured SPS table:
    tokens per verify step and throughput against verifying every slot."""
    K = conf_sts.shape[1]
    sched_tok, full_tok, sched_thr, full_thr, lens = [], [], [], [], []
    for b in range(len(acc) // R):
        sl = slice(b * R, (b + 1) * R)
        chosen = np.asarray(prefix_schedule(conf_sts[sl], sps))
        lens.extend(chosen.tolist())
        committed = np.minimum(acc[sl], chosen) + 1
        sched_tok.append(committed.sum())
        sched_thr.append(committed.sum() * sps_lookup(sps, int(R + chosen.sum())))
        full_tok.append((acc[sl] + 1).sum())
        full_thr.append((acc[sl] + 1).sum() * sps_lookup(sps, R * (K + 1)))
    if not lens:
        return {}
    m = {"sched/alg1_len": float(np.mean(lens)), "sched/alg1_tokens_per_step": float(np.mean(sched_tok)),
         "sched/full_tokens_per_step": float(np.mean(full_tok)), "sched/alg1_throughput": float(np.mean(sched_thr)),
         "sched/full_throughput": float(np.mean(full_thr))}
    m["sched/alg1_gain"] = m["sched/alg1_throughput"] / m["sched/full_throughput"]
    return m
