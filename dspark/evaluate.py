"""The teacher-forced evaluator: one for every arm, always in the aligned frame.

Whatever window an arm trained on, it is measured on the task it will face: previous
token x[a+s], label x[a+s+1], target distribution at a+s, strided anchors over fixed
validation windows, uniform slot weights (so arms with different decay_gamma are scored
on the same scale).

Responses: `tf/tau`, `tf/accept@k` (k = 1..K, mean c* per slot), `tf/ce`, `tf/tv`, the
confidence head against the soft labels c* (`tf/conf_ece`, `tf/conf_brier`,
`tf/conf_auroc`), and `val/bpb`, the target LM's bits per byte.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from . import calibration
from .blocks import Models, draft_blocks
from .loss import acceptance_target, dspark_loss
from .windows import strided_anchors


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


@torch.no_grad()
def teacher_forced(models: Models, batches: list[torch.Tensor], stride: int, device, autocast) -> dict:
    K = models.block_size
    sums: dict[str, float] = {}
    accept_num = torch.zeros(K)
    accept_den = torch.zeros(K)
    taus, preds, labels = [], [], []
    n_batches = 0
    lm_ce, lm_n = 0.0, 0
    for x in batches:
        x = x.to(device)
        T = x.shape[1] - 1
        anchors = strided_anchors(T, stride).to(device).expand(x.shape[0], -1)  # (B, A)
        with autocast():
            out = draft_blocks(models, x, anchors, "aligned")
        lm_ce += F.cross_entropy(out.lm.logits.float().reshape(-1, out.lm.logits.shape[-1]),
                                 x[:, 1:].reshape(-1), reduction="sum").item()
        lm_n += x[:, 1:].numel()
        res = dspark_loss(draft_logits=out.draft_logits.float(), target_logits=out.target_logits.float(),
                          labels=out.labels, valid=out.valid, confidence_logits=out.conf_logits.float(),
                          decay_gamma=None)
        for key in ("ce", "tv", "conf"):
            sums[key] = sums.get(key, 0.0) + res[key].item()
        taus.append(res["tau_tf"].item())
        c_star = acceptance_target(out.draft_logits.float(), out.target_logits.float())  # (B, A, K)
        v = out.valid.float()
        accept_num += (c_star * v).sum(dim=(0, 1)).cpu()
        accept_den += v.sum(dim=(0, 1)).cpu()
        m = out.valid
        preds.append(torch.sigmoid(out.conf_logits.float())[m].cpu())
        labels.append(c_star[m].cpu())
        n_batches += 1
    metrics = {f"tf/{k}": v / n_batches for k, v in sums.items()}
    metrics["tf/tau"] = float(np.mean(taus))
    acc = accept_num / accept_den.clamp_min(1)
    for k in range(K):
        metrics[f"tf/accept@{k + 1}"] = acc[k].item()
    p = torch.cat(preds).numpy()
    y = torch.cat(labels).numpy()
    metrics["tf/conf_ece"] = calibration.ece(p, y)
    metrics["tf/conf_brier"] = calibration.brier(p, y)
    metrics["tf/conf_auroc"] = calibration.auroc(p, y)
    metrics["val/bpb"] = lm_ce / lm_n / math.log(2.0)
    return metrics
