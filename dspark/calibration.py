"""Calibration metrics and Sequential Temperature Scaling (paper section 3.2.1).

The metrics take predicted probabilities and labels in [0, 1]; a soft label y counts as a
positive of weight y and a negative of weight 1 - y, so the same functions serve the
teacher-forced soft labels c* and the 0/1 prefix survival observed in decoding.

STS: each c_i is a conditional survival probability, so the prefix survival estimate is
prod_{i<=k} c_i. Left to right, slot k gets one temperature t_k applied to its logit,
chosen by a 1-D grid search minimising the ECE of the cumulative product at slot k with
the temperatures of slots < k held fixed. Temperature scaling is monotone, so the order of
each slot's scores is kept.
"""

from __future__ import annotations

import numpy as np

N_BINS = 20
TEMPERATURE_GRID = np.exp(np.linspace(np.log(0.05), np.log(20.0), 161))


def ece(pred, label, n_bins: int = N_BINS) -> float:
    """Expected calibration error with equal-width bins: sum_b |B|/N |mean p - mean y|."""
    p = np.asarray(pred, dtype=np.float64).ravel()
    y = np.asarray(label, dtype=np.float64).ravel()
    if p.size == 0:
        return float("nan")
    bins = np.clip((p * n_bins).astype(int), 0, n_bins - 1)
    sum_p = np.bincount(bins, weights=p, minlength=n_bins)
    sum_y = np.bincount(bins, weights=y, minlength=n_bins)
    return float(np.abs(sum_p - sum_y).sum() / p.size)


def brier(pred, label) -> float:
    p = np.asarray(pred, dtype=np.float64).ravel()
    y = np.asarray(label, dtype=np.float64).ravel()
    return float(np.mean((p - y) ** 2)) if p.size else float("nan")


def auroc(pred, label) -> float:
    """P(score of a positive > score of a negative), ties counting half; soft labels weight
    each item as a positive (y) and a negative (1 - y). NaN when a class has no weight."""
    p = np.asarray(pred, dtype=np.float64).ravel()
    y = np.asarray(label, dtype=np.float64).ravel()
    pos_w, neg_w = y, 1.0 - y
    if pos_w.sum() <= 0 or neg_w.sum() <= 0:
        return float("nan")
    order = np.argsort(p, kind="mergesort")
    p, pos_w, neg_w = p[order], pos_w[order], neg_w[order]
    # group ties, then for each group: positives beat all negatives in lower groups + half the tied
    uniq, start = np.unique(p, return_index=True)
    pos_g = np.add.reduceat(pos_w, start)
    neg_g = np.add.reduceat(neg_w, start)
    neg_below = np.concatenate([[0.0], np.cumsum(neg_g)[:-1]])
    wins = (pos_g * (neg_below + 0.5 * neg_g)).sum()
    return float(wins / (pos_w.sum() * neg_w.sum()))


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return np.log(p) - np.log1p(-p)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def fit_sts(conf: np.ndarray, survived: np.ndarray, valid: np.ndarray | None = None,
            grid: np.ndarray = TEMPERATURE_GRID, n_bins: int = N_BINS) -> np.ndarray:
    """Fit one temperature per slot, left to right.

    conf (N, K) raw per-slot confidences c_k; survived (N, K) 1 where the prefix up to k
    was accepted (labels of prod c); valid (N, K) which slots count (default all).
    Returns temperatures (K,).
    """
    conf = np.asarray(conf, dtype=np.float64)
    survived = np.asarray(survived, dtype=np.float64)
    valid = np.ones_like(conf, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    N, K = conf.shape
    logits = _logit(conf)
    temps = np.ones(K)
    prefix = np.ones(N)  # calibrated prod_{i<k} c_i, held fixed
    for k in range(K):
        m = valid[:, k]
        if m.sum() == 0:
            prefix = prefix * _sigmoid(logits[:, k])
            continue
        best_t, best_e = 1.0, np.inf
        for t in grid:
            e = ece(prefix[m] * _sigmoid(logits[m, k] / t), survived[m, k], n_bins)
            if e < best_e - 1e-12:
                best_t, best_e = t, e
        temps[k] = best_t
        prefix = prefix * _sigmoid(logits[:, k] / best_t)
    return temps


def apply_sts(conf: np.ndarray, temps: np.ndarray) -> np.ndarray:
    """Calibrated per-slot c_k (N, K) under per-slot temperatures."""
    return _sigmoid(_logit(np.asarray(conf, dtype=np.float64)) / np.asarray(temps)[None, :])


def prefix_metrics(conf: np.ndarray, survived: np.ndarray, valid: np.ndarray, prefix: str) -> dict:
    """ECE / AUROC / Brier of prod_{i<=k} c_i against observed prefix survival, per slot
    (`{prefix}ece@k`, k = 1..K) and pooled (`{prefix}ece`)."""
    cum = np.cumprod(conf, axis=1)
    out = {}
    K = conf.shape[1]
    for k in range(K):
        m = valid[:, k]
        out[f"{prefix}ece@{k + 1}"] = ece(cum[m, k], survived[m, k])
        out[f"{prefix}auroc@{k + 1}"] = auroc(cum[m, k], survived[m, k])
        out[f"{prefix}brier@{k + 1}"] = brier(cum[m, k], survived[m, k])
    out[f"{prefix}ece"] = ece(cum[valid], survived[valid])
    out[f"{prefix}auroc"] = auroc(cum[valid], survived[valid])
    out[f"{prefix}brier"] = brier(cum[valid], survived[valid])
    return out
