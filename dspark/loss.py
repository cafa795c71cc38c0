"""The DSpark objective, Eq 8-12, with the metrics the reference code logs.

Per slot weight w_k = exp(-(k-1)/decay_gamma) (k = 1..K) times the validity mask:
  CE   = sum w * ce(draft, label) / sum w                       (Eq 9)
  TV   = sum w * ||softmax(draft) - softmax(target)||_1 / sum w (Eq 10, the full L1)
  c*   = clamp(1 - 0.5 ||p_d - p_t||_1, 0, 1), detached         (Eq 8)
  CONF = sum w * BCE_with_logits(conf, c*) / sum w              (Eq 11)
  L    = 0.1 CE + 0.9 TV + 1.0 CONF                             (Eq 12)

Shapes: (..., K, V) logits, (..., K) labels / valid / confidence logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-6  # the reference code's denominator guard


def position_weights(block_size: int, decay_gamma: float | None) -> torch.Tensor:
    """exp(-(k-1)/decay_gamma) for k = 1..K: (K,). `None` gives uniform weights."""
    k = torch.arange(block_size, dtype=torch.float32)
    if decay_gamma is None:
        return torch.ones(block_size)
    if not decay_gamma > 0:
        raise ValueError(f"decay_gamma: must be > 0, got {decay_gamma}")
    return torch.exp(-k / float(decay_gamma))


def _l1(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    p_draft = torch.softmax(draft_logits.float(), dim=-1)
    p_target = torch.softmax(target_logits.float(), dim=-1)
    return (p_draft - p_target).abs().sum(dim=-1)


def acceptance_target(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """c* = clamp(1 - 0.5 ||softmax(d) - softmax(t)||_1, 0, 1) over the last dim (Eq 8)."""
    return (1.0 - 0.5 * _l1(draft_logits, target_logits)).clamp(0.0, 1.0)


def tau_from_accept(accept: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean over blocks with a valid slot of 1 + sum_k prod_{i<=k} (a * valid)_i."""
    a = (accept * valid).float()
    keep = valid.any(dim=-1)
    per_block = 1.0 + a.cumprod(dim=-1).sum(dim=-1)
    return (per_block * keep).sum() / keep.sum().clamp_min(1)


def dspark_loss(*, draft_logits, target_logits, labels, valid, confidence_logits, decay_gamma,
                alphas=(0.1, 0.9, 1.0)) -> dict:
    """The DSpark loss (Eq 8-12) and its no-grad metrics. Keyword-only: seven tensors and
    numbers in a row are too easy to pass in the wrong order. `alphas` = (alpha_ce,
    alpha_tv, alpha_conf); a run passes its config's (`Trainer.head_loss`).

    Returns tensors: `loss`, `ce`, `tv`, `conf`, `tau_tf`, `accept_rate` (K,), and the
    confidence diagnostics `conf_abs_error`, `conf_bias`, `conf_cumprod_bias`.
    """
    K = draft_logits.shape[-2]
    validf = valid.float()
    w = position_weights(K, decay_gamma).to(draft_logits.device) * validf  # (..., K)
    wsum = w.sum() + EPS
    logits32 = draft_logits.float()
    ce_tok = F.cross_entropy(logits32.reshape(-1, logits32.shape[-1]),
                             labels.reshape(-1).long().clamp(0, logits32.shape[-1] - 1),
                             reduction="none").view(labels.shape)
    ce = (w * ce_tok).sum() / wsum
    l1 = _l1(draft_logits, target_logits)  # (..., K)
    tv = (w * l1).sum() / wsum
    c_star = (1.0 - 0.5 * l1).clamp(0.0, 1.0).detach()
    a_ce, a_tv, a_conf = alphas
    out = {"ce": ce, "tv": tv}
    if confidence_logits is not None:
        cl = confidence_logits.float()
        bce = F.binary_cross_entropy_with_logits(cl, c_star, reduction="none")
        conf = (w * bce).sum() / wsum
        with torch.no_grad():
            sig = torch.sigmoid(cl)
            out["conf_abs_error"] = (w * (sig - c_star).abs()).sum() / wsum
            out["conf_bias"] = (w * (sig - c_star)).sum() / wsum
            cum_pred = (sig * validf).cumprod(dim=-1)
            cum_true = (c_star * validf).cumprod(dim=-1)
            out["conf_cumprod_bias"] = (w * (cum_pred - cum_true)).sum() / wsum
    else:
        conf = torch.zeros((), device=draft_logits.device)
    out["conf"] = conf
    out["loss"] = a_ce * ce + a_tv * tv + a_conf * conf
    with torch.no_grad():
        lead = tuple(range(validf.dim() - 1))
        out["accept_rate"] = (c_star * validf).sum(dim=lead) / (validf.sum(dim=lead) + EPS)
        out["tau_tf"] = tau_from_accept(c_star, valid)
    return out
