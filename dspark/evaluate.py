"""The teacher-forced evaluator: one for every arm, always in the aligned frame.

Whatever window an arm trained on, it is measured on the task it will face: previous
token x[a+s], label x[a+s+1], target distribution at a+s, strided anchors over fixed
validation windows, uniform slot weights (so arms with different decay_gamma are scored
on the same scale).

Responses: `tf/tau`, `tf/accept@k` (k = 1..K, mean c* per slot), `tf/ce`, `tf/tv`, the
confidence head against the soft labels c* (`tf/conf_ece`, `tf/conf_brier`,
`tf/conf_auroc`), `val/bpb`, the target LM's bits per byte, and `split/eval_batches`.

With `jackknife`, each response of `JACK_RESPONSES` also comes recomputed without each
group of held-out batches (batch i in group i mod G, G = `metrics.jack_groups`), as the
run's items (`report(metrics, items=...)`): from per-batch sufficient statistics, so no
second forward pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from . import calibration
from .blocks import Models, draft_blocks
from .loss import acceptance_target, dspark_loss
from .metrics import jack_groups, jackknifed
from .windows import strided_anchors

# the responses an evaluation's jackknife recomputes (tf/accept@k and tf/conf are not)
JACK_RESPONSES = ("val/bpb", "tf/tau", "tf/ce", "tf/tv", "tf/conf_ece", "tf/conf_auroc", "tf/conf_brier")


@torch.no_grad()
def lm_bpb(target, batches: list[torch.Tensor], device, autocast) -> float:
    total, n = 0.0, 0
    for x in batches:
        x = x.to(device)
        with autocast():
            logits = target(x[:, :-1]).logits
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        total += ce.item()
        n += x[:, 1:].numel()
    return total / n / math.log(2.0)


@dataclass
class BatchStats:
    """One held-out batch's share of the responses: enough to recompute them on any subset
    of the batches."""
    lm_ce: float  # the LM's summed CE over the batch's tokens (nats)
    lm_n: int  # tokens scored
    tau: float
    ce: float
    tv: float
    conf: float
    pred: np.ndarray  # (N,) sigmoid of the confidence logits on valid slots
    label: np.ndarray  # (N,) their soft labels c*


def pooled(stats: list[BatchStats]) -> dict:
    """The responses of a set of batches: bpb from summed CE over summed tokens, the loss
    terms and tau as means over batches, calibration on the pooled predictions."""
    p = np.concatenate([s.pred for s in stats])
    y = np.concatenate([s.label for s in stats])
    return {"val/bpb": sum(s.lm_ce for s in stats) / sum(s.lm_n for s in stats) / math.log(2.0),
            "tf/tau": float(np.mean([s.tau for s in stats])),
            "tf/ce": float(np.mean([s.ce for s in stats])),
            "tf/tv": float(np.mean([s.tv for s in stats])),
            "tf/conf": float(np.mean([s.conf for s in stats])),
            "tf/conf_ece": calibration.ece(p, y), "tf/conf_brier": calibration.brier(p, y),
            "tf/conf_auroc": calibration.auroc(p, y)}


def jackknife(stats: list[BatchStats]) -> dict[str, dict]:
    """response -> its items: each of JACK_RESPONSES without batch group k, k = 0..G-1
    (none for one batch)."""
    G = jack_groups(len(stats))
    if G < 2:
        return {}
    kept = [pooled([s for i, s in enumerate(stats) if i % G != g]) for g in range(G)]
    return {r: jackknifed(len(stats), [k[r] for k in kept]) for r in JACK_RESPONSES}


def _batch(models: Models, x: torch.Tensor, stride: int, autocast) -> tuple[BatchStats, torch.Tensor, torch.Tensor]:
    """One batch's statistics, and its per-slot acceptance sums: (c* sum (K,), valid count (K,))."""
    T = x.shape[1] - 1
    anchors = strided_anchors(T, stride).to(x.device).expand(x.shape[0], -1)  # (B, A)
    with autocast():
        out = draft_blocks(models, x, anchors, "aligned")
    lm_ce = F.cross_entropy(out.lm.logits.float().reshape(-1, out.lm.logits.shape[-1]),
                            x[:, 1:].reshape(-1), reduction="sum").item()
    res = dspark_loss(draft_logits=out.draft_logits.float(), target_logits=out.target_logits.float(),
                      labels=out.labels, valid=out.valid, confidence_logits=out.conf_logits.float(),
                      decay_gamma=None)
    c_star = acceptance_target(out.draft_logits.float(), out.target_logits.float())  # (B, A, K)
    v = out.valid.float()
    m = out.valid
    stats = BatchStats(lm_ce=lm_ce, lm_n=x[:, 1:].numel(), tau=res["tau_tf"].item(), ce=res["ce"].item(),
                       tv=res["tv"].item(), conf=res["conf"].item(),
                       pred=torch.sigmoid(out.conf_logits.float())[m].cpu().numpy(),
                       label=c_star[m].cpu().numpy())
    return stats, (c_star * v).sum(dim=(0, 1)).cpu(), v.sum(dim=(0, 1)).cpu()


@torch.no_grad()
def teacher_forced(models: Models, batches: list[torch.Tensor], stride: int, device, autocast,
                   jackknife_groups: bool = False) -> tuple[dict, dict]:
    """(metrics, items): the teacher-forced responses on `batches`, and with
    `jackknife_groups` their items (`jackknife`; a run's final evaluation), else none."""
    K = models.block_size
    accept_num = torch.zeros(K)
    accept_den = torch.zeros(K)
    stats = []
    for x in batches:
        s, num, den = _batch(models, x.to(device), stride, autocast)
        stats.append(s)
        accept_num += num
        accept_den += den
    metrics = pooled(stats)
    acc = accept_num / accept_den.clamp_min(1)
    for k in range(K):
        metrics[f"tf/accept@{k + 1}"] = acc[k].item()
    metrics["split/eval_batches"] = float(len(stats))  # a count the engine keeps with the items
    return metrics, (jackknife(stats) if jackknife_groups else {})
