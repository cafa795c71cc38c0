"""The speculative-decoding responses of a drafter-stage run (docs/responses.md).

On fixed held-out prompts and fixed decoding seeds (the same for every arm): accepted
length per round at temperature 1 and greedy, conditional acceptance per slot, wall-clock
speedup against autoregressive decoding of the same target measured in this process,
calibration of prod c_k against the prefix actually accepted (raw, and after STS fitted on
the calibration split), a static-threshold sweep, accepted tokens at a matched verification
budget, and Algorithm 1 over concurrent requests (on this machine's measured table, and
over R = 1, 16, 64 requests on the run's named capacity curve `sched_curve`).

The recorded rounds (`Rounds`, written as artifacts/rounds.npz) hold everything the
evaluation-derived responses are computed from; each is also recomputed without prompt
group k (a delete-a-group jackknife) by the same function: the run's items, which
`evaluate_speculative` returns beside its metrics.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import calibration
from .artifacts import decoding_artifacts
from .blocks import Models
from .curves import curve_table, describe_curve, measure_grid
from .metrics import jack_groups, jackknifed
from .data import fixed_batches
from .schedule import load_or_measure_sps, prefix_schedule, sps_lookup
from .model import sync
from .speculate import RoundStats, autoregressive, generate

THRESHOLDS = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
PER_PROMPT_FILE = "per_prompt.json"
ROUNDS_FILE = "rounds.npz"  # the recorded rounds (Rounds.save), beside per_prompt.json
CURVE_FILE = "sched_curve.json"  # the named capacity curve's description and SPS at its grid points
CONCURRENT_REQUESTS = 4  # the measured-table Algorithm 1 responses (sched/alg1_throughput, ...)
SCHED_REQUESTS = (1, 16, 64)  # sched/alg1_throughput@R<R> on the run's sched_curve
BUDGETS = (2, 4)  # sched/accepted@budget<b>: draft tokens verified per round on average
SCHED_SEED = 20260707  # the permutation that deals recorded rounds into batches of R requests
CALIBRATION_RESPONSES = ("conf/ece_mean", "conf/auroc_mean", "conf/brier_mean")
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


def decode_set(models: Models, prompts, new_tokens: int, temperature: float, device, n_timed: int = 0,
               progress: Callable[[int, int], None] | None = None):
    """Speculative decoding of every prompt; on the first `n_timed` prompts autoregressive
    decoding too, interleaved so both see the same machine state. Returns (stats,
    per-prompt tau, spec seconds and AR seconds per timed prompt). `progress` hears
    (prompts done, prompts)."""
    target, drafter, head = models.target, models.drafter, models.head
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


def evaluate_speculative(models: Models, corpus, cfg, device, out_dir: Path | None, n_prompts: int | None = None,
                         full: bool = True, progress: Progress | None = None):
    """(metrics, items): all speculative responses, and where `full` their items and the
    artifacts (histogram, reliability diagram, SPS table, per-prompt statistics, recorded
    rounds, to out_dir/artifacts). `progress` hears each phase's prompts."""
    K, target = cfg.block_size, models.target
    n = n_prompts or cfg.spec_prompts
    for m in (target, models.drafter, models.head):
        m.eval()
    val_prompts = prompts_from(corpus.val, n, cfg.spec_prompt_len)
    n_timed = min(n, SPEEDUP_PROMPTS) if full else 0

    def decode(phase, prompts, temperature, timed):
        hook = None if progress is None else (lambda i, total: progress(phase, i, total))
        return decode_set(models, prompts, cfg.spec_new_tokens, temperature, device, timed, hook)

    t_start = time.perf_counter()
    stats, taus, spec_s, ar_s = decode("decode (sampled)", val_prompts, 1.0, n_timed)
    m = acceptance_metrics(stats.accepted, taus, K)
    if not full:
        return m, {}
    m.update(timing_metrics(stats, sum(spec_s), sum(ar_s), n_timed * cfg.spec_new_tokens))
    g_stats, g_taus, g_spec_s, g_ar_s = decode("decode (greedy)", val_prompts, 0.0, n_timed)
    m["spec/speedup_greedy"] = sum(g_ar_s) / sum(g_spec_s)

    conf, survived, acc = _survival(stats, K)
    cal_stats, *_ = decode("calibrate (STS)", prompts_from(corpus.calib, n, cfg.spec_prompt_len), 1.0, 0)
    conf_sts, temps, cal = calibrate(conf, survived, *_survival(cal_stats, K)[:2])
    m.update(cal)
    m.update(threshold_sweep(conf, conf_sts, acc))
    sizes = list(range(CONCURRENT_REQUESTS, CONCURRENT_REQUESTS * (K + 1) + 1))
    sps = load_or_measure_sps(target, sps_cache_path(), sizes, cfg.spec_prompt_len)
    m.update(algorithm1(conf_sts, acc, sps, CONCURRENT_REQUESTS))
    rounds = Rounds.record(stats, g_stats, conf_sts, temps)
    largest = max([R for R in SCHED_REQUESTS if R <= len(acc)], default=1) * (K + 1)
    curve = curve_table(cfg.sched_curve, largest,
                        lambda grid: load_or_measure_sps(target, sps_cache_path(), grid, cfg.spec_prompt_len))
    m.update(evaluation_responses(rounds, curve))
    jack = jackknife(rounds, n, curve)
    per_prompt = prompt_statistics(taus, g_taus, spec_s, ar_s, n, jack, decode_s=time.perf_counter() - t_start)
    counts, items = evaluation_records(per_prompt)
    m.update(counts)
    if out_dir is not None:
        art = Path(out_dir) / "artifacts"
        decoding_artifacts(art, acc, K, conf, conf_sts, survived, temps, sps)
        (art / PER_PROMPT_FILE).write_text(json.dumps(per_prompt))
        rounds.save(art / ROUNDS_FILE)
        (art / CURVE_FILE).write_text(json.dumps({**describe_curve(cfg.sched_curve), "rows": [
            {"batch_tokens": b, "steps_per_s": curve[b]} for b in measure_grid(largest)]}, indent=1))
    return m, items


@dataclass
class Rounds:
    """One evaluation's recorded rounds: everything its evaluation-derived responses are
    computed from, so that each can be recomputed on a subset of the prompts."""

    conf: np.ndarray  # (N, K) raw per-slot confidences c_k, temperature-1 rounds
    conf_sts: np.ndarray  # (N, K) after STS (fitted on the calibration split's own rounds)
    accepted: np.ndarray  # (N,) draft tokens accepted per round
    prompt: np.ndarray  # (N,) the validation prompt each round decoded
    accepted_greedy: np.ndarray  # (M,) draft tokens accepted per greedy round
    prompt_greedy: np.ndarray  # (M,)
    temps: np.ndarray  # (K,) the STS temperatures

    @classmethod
    def record(cls, stats: RoundStats, g_stats: RoundStats, conf_sts, temps) -> "Rounds":
        def owner(s):  # prompt i decoded s.prompt_rounds[i] consecutive rounds
            return np.repeat(np.arange(len(s.prompt_rounds)), s.prompt_rounds).astype(np.int64)

        conf = torch.stack(stats.conf).numpy().astype(np.float64)  # (N, K)
        return cls(conf, np.asarray(conf_sts, np.float64), np.asarray(stats.accepted, np.int64), owner(stats),
                   np.asarray(g_stats.accepted, np.int64), owner(g_stats), np.asarray(temps, np.float64))

    @property
    def survived(self) -> np.ndarray:
        """(N, K) 1.0 where the prefix up to slot k was accepted."""
        K = self.conf.shape[1]
        return (self.accepted[:, None] >= np.arange(1, K + 1)[None, :]).astype(np.float64)

    def without_group(self, group: int, groups: int) -> "Rounds":
        """The rounds of every prompt outside group `group` (prompt i is in group i mod `groups`)."""
        keep, keep_g = self.prompt % groups != group, self.prompt_greedy % groups != group
        return Rounds(self.conf[keep], self.conf_sts[keep], self.accepted[keep], self.prompt[keep],
                      self.accepted_greedy[keep_g], self.prompt_greedy[keep_g], self.temps)

    def save(self, path: Path) -> None:
        np.savez_compressed(path, conf=self.conf, conf_sts=self.conf_sts, accepted=self.accepted, prompt=self.prompt,
                            accepted_greedy=self.accepted_greedy, prompt_greedy=self.prompt_greedy,
                            sts_temperatures=self.temps)

    @classmethod
    def load(cls, path) -> "Rounds":
        with np.load(path, allow_pickle=False) as z:
            return cls(z["conf"], z["conf_sts"], z["accepted"], z["prompt"], z["accepted_greedy"],
                       z["prompt_greedy"], z["sts_temperatures"])


def tau(accepted) -> float:
    """Mean tokens committed per round, the bonus token included (NaN for no rounds)."""
    acc = np.asarray(accepted)
    return float(np.mean(acc + 1)) if acc.size else float("nan")


def is_jacked(name: str) -> bool:
    """The evaluation-derived responses that carry jackknife records."""
    return (name in ("spec/tau", "spec/tau_greedy") + CALIBRATION_RESPONSES
            or name.startswith(("sched/accepted@budget", "sched/alg1_throughput@R")))


def evaluation_responses(rounds: Rounds, curve: dict[int, float]) -> dict[str, float]:
    """The evaluation-derived responses of recorded rounds: tau (sampled, greedy), the
    calibration means, accepted tokens at matched budgets and Algorithm 1 over R requests
    on `curve` (SPS per batch size in tokens). The full evaluation and every jackknife
    value come from this one function."""
    K = rounds.conf.shape[1]
    m = {"spec/tau": tau(rounds.accepted), "spec/tau_greedy": tau(rounds.accepted_greedy)}
    survived = rounds.survived
    cal = calibration.prefix_metrics(rounds.conf, survived, np.ones_like(survived, bool), "conf/") \
        if len(rounds.accepted) else {}
    m.update({k: float(cal.get(k, float("nan"))) for k in CALIBRATION_RESPONSES})
    for b in BUDGETS:
        if b <= K:
            m[f"sched/accepted@budget{b}"] = accepted_at_budget(rounds.conf_sts, rounds.accepted, b)
    for R in SCHED_REQUESTS:
        m.update(alg1_over_requests(rounds.conf_sts, rounds.accepted, curve, R))
    return m


def jackknife(rounds: Rounds, n_prompts: int, curve: dict[int, float]) -> dict[str, list[float]]:
    """response -> its value without prompt group k, k = 0..G-1 (prompt i in group i mod G,
    G = metrics.jack_groups(n_prompts)), for every response `is_jacked` names. A value a
    group's removal leaves undefined (fewer rounds than R requests) is NaN."""
    G = jack_groups(n_prompts)
    names = [k for k in evaluation_responses(rounds, curve) if is_jacked(k)]
    out: dict[str, list[float]] = {k: [] for k in names}
    for g in range(G):
        sub = evaluation_responses(rounds.without_group(g, G), curve)
        for k in names:
            out[k].append(float(sub.get(k, float("nan"))))
    return out


def evaluation_records(per_prompt: dict) -> tuple[dict[str, float], dict[str, dict]]:
    """(counts, items): the prompt count, the timed prompts' count and the decoding seconds
    per prompt (`split/` metrics, which the engine keeps with the items), and each jackknifed
    response's items (none where fewer than 2 prompts form no groups)."""
    m = {"split/prompts": float(per_prompt["spec_prompts"]),
         "split/timed_prompts": float(per_prompt["timed_prompts"]),
         "split/decode_s_per_prompt": float(per_prompt["decode_s_per_prompt"])}
    n = per_prompt["spec_prompts"]
    items = {name: jackknifed(n, values) for name, values in per_prompt["jack"].items() if jack_groups(n) >= 2}
    return m, items


def prompt_statistics(taus, g_taus, spec_s, ar_s, n_prompts: int, jack: dict[str, list[float]],
                      decode_s: float) -> dict:
    """What the analysis needs to tell the evaluation's own noise from the seeds': per
    prompt, tau (sampled and greedy) and the timed prompts' seconds; and every
    evaluation-derived response recomputed without each prompt group (`jackknife`; every
    run decodes the same prompts, so group g is the same prompts in every run). Timed
    responses have no groups: more prompts do not price their noise."""
    return {"spec_prompts": n_prompts, "groups": jack_groups(n_prompts), "timed_prompts": len(spec_s),
            "tau": list(map(float, taus)), "tau_greedy": list(map(float, g_taus)), "spec_s": spec_s, "ar_s": ar_s,
            "decode_s_per_prompt": decode_s / max(1, n_prompts), "jack": jack}


def acceptance_metrics(accepted: list[int], taus: list[float], K: int) -> dict[str, float]:
    """Mean tokens per round (+ its standard error and 10th percentile over prompts) and
    acceptance per slot."""
    m = {"spec/tau": tau(accepted),
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


def accepted_at_budget(conf_sts, acc, budget: int) -> float:
    """Accepted draft tokens per round when `budget` draft tokens per round are verified
    on average: the survival threshold chosen to meet the budget exactly. Every (round,
    slot) position is ranked by its calibrated prefix survival a_{r,j} = prod_{i<=j} c_{r,i}
    (ties: lower slot first, then lower round); the top budget * N positions are verified.
    a is non-increasing in j, so each round r verifies a prefix of l_r slots, sum l_r =
    budget * N; the response is mean_r min(acc_r, l_r). conf_sts (N, K), acc (N,)."""
    lengths = budget_lengths(conf_sts, budget)
    return float(np.minimum(np.asarray(acc), lengths).mean()) if len(lengths) else float("nan")


def budget_lengths(conf_sts, budget: int) -> np.ndarray:
    """The verified length l_r (N,) of each round when the budget * N positions of highest
    calibrated prefix survival are verified (see `accepted_at_budget`)."""
    c = np.asarray(conf_sts, dtype=np.float64)
    N, K = c.shape
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or not 1 <= budget <= K:
        raise ValueError(f"accepted_at_budget: budget {budget!r} is not a whole number of draft tokens in 1..K={K}")
    a = np.cumprod(c, axis=1).ravel()  # (N*K,) position r*K + j
    r, j = np.divmod(np.arange(N * K), K)
    order = np.lexsort((r, j, -a))  # a descending, then lower slot, then lower round
    return np.bincount(r[order[:budget * N]], minlength=N)  # (N,)


def alg1_over_requests(conf_sts, acc, sps, R: int, seed: int = SCHED_SEED) -> dict[str, float]:
    """Algorithm 1 (`prefix_schedule`) over batches of R concurrent requests: the recorded
    rounds in a fixed seeded permutation, dealt into consecutive batches of R (the
    remainder dropped; no batch, no values). Per batch, committed tokens = sum_r
    (min(acc_r, l_r) + 1) and throughput = committed * SPS(R + sum_r l_r) tokens/s.
    Returns the mean throughput over batches, the mean chosen length, and `alg1_fixed`
    = 1.0 when every request of every batch got the same length (a degenerate curve)."""
    acc = np.asarray(acc)
    order = np.random.default_rng(seed).permutation(len(acc))
    throughput, lengths = [], []
    for b in range(len(acc) // R):
        idx = order[b * R:(b + 1) * R]
        chosen = np.asarray(prefix_schedule(conf_sts[idx], sps))
        committed = float((np.minimum(acc[idx], chosen) + 1).sum())
        throughput.append(committed * sps_lookup(sps, int(R + chosen.sum())))
        lengths.extend(chosen.tolist())
    if not lengths:
        return {}
    return {f"sched/alg1_throughput@R{R}": float(np.mean(throughput)), f"sched/alg1_len@R{R}": float(np.mean(lengths)),
            f"sched/alg1_fixed@R{R}": float(len(set(lengths)) == 1)}
