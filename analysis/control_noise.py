"""The control contrast's own error (`control_noise`): every factorial arm pooled against the
control arm, paired over the blocks and crossed with the item groups, each part of its
variance with its df (the block x term, items x term and items x runs parts of
`analysis.variance`'s split, for the one contrast the factorial model does not hold)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from trials.registry import Registry

from .result_types import TermNoise
from .variance import item_records


def control_noise(runs: pd.DataFrame, response: str, control: str, rules: Registry | None = None) -> TermNoise | None:
    """The control contrast's own error: paired over the blocks. Per block b and item group k
    (one group where the runs carry no item records), d_bk is the factorial arms' mean minus
    the control's; with d_bk = theta + beta_b + a_k + e_bk crossed, the estimate's variance is
    (MS_blocks + MS_items - MS_error) / (B G): its block x term part (the seeds' and a seed's
    favour of one arm, B - 1 df), its items x term part (G - 1 df, 0 where its estimate is
    negative) and the items x runs noise, with Satterthwaite's df. None where the blocks are
    fewer than 2 or not balanced (every arm the same runs in every block): HC2 stays."""
    if "replicate" not in runs.columns or runs["replicate"].nunique() < 2 or control not in set(runs["cell"]):
        return None
    arm = runs["arm"].astype(str) if "arm" in runs.columns else pd.Series("factorial", index=runs.index)
    d = runs[(runs["cell"] == control) | (arm == "factorial")]
    counts = pd.crosstab(d["cell"].astype(str), d["replicate"].astype(str)).to_numpy()
    if counts.min() < 1 or counts.min() != counts.max():
        return None
    items = item_records(d, response, rules)
    values = items.pseudo if items is not None else pd.to_numeric(d[response]).to_numpy(float)[:, None]  # (n, G)
    blocks, ctl = d["replicate"].astype(str).to_numpy(), (d["cell"] == control).to_numpy()
    D = np.array([values[(blocks == b) & ~ctl].mean(axis=0) - values[(blocks == b) & ctl].mean(axis=0)
                  for b in sorted(set(blocks))])  # (B, G)
    B, G = D.shape
    if G == 1:
        v = float(np.var(D[:, 0], ddof=1)) / B
        return TermNoise(v, B - 1.0, 0.0, 0.0, 0.0, 0.0, B, "block x term (paired over blocks)", B - 1.0)
    row, col, grand = D.mean(axis=1, keepdims=True), D.mean(axis=0, keepdims=True), float(D.mean())
    ms_b = G * float(((row - grand) ** 2).sum()) / (B - 1)
    ms_g = B * float(((col - grand) ** 2).sum()) / (G - 1)
    df_e = (B - 1.0) * (G - 1.0)
    ms_e = float(((D - row - col + grand) ** 2).sum()) / df_e
    n = B * G
    item_run, seeds, item_term = ms_e / n, max(ms_b - ms_e, 0.0) / n, max(ms_g - ms_e, 0.0) / n
    if item_term > 0:
        total = (ms_b + ms_g - ms_e) / n
        df = total ** 2 / ((ms_b / n) ** 2 / (B - 1) + (ms_g / n) ** 2 / (G - 1) + (ms_e / n) ** 2 / df_e)
    else:
        df = B - 1.0
    p = float(stats.f.sf(ms_g / ms_e, G - 1, df_e)) if ms_e > 0 else 1.0
    return TermNoise(seeds, B - 1.0, item_run, df_e, item_term, G - 1.0, B, "block x term (paired over blocks)",
                     float(df), p)
