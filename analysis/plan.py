"""`analysis plan`: how many replicates a sweep needs to detect a given effect, using the
residual sigma that an existing experiment measured (`analysis.power`)."""

from __future__ import annotations

import pandas as pd

from . import power
from .anova import AnalysisError
from .design import factorial_rows
from .report import choose_responses, sensitivity
from .attribution import analyse


def plan_text(df: pd.DataFrame, effect: float, responses: list[str] | None = None, alpha: float = 0.05,
              target_power: float = 0.8) -> str:
    """One line per response: its sigma, the power this sweep had, the replicates needed."""
    if not effect or effect != effect:
        raise AnalysisError(f"--effect: must be a non-zero number, got {effect!r}")
    factors = list(df.attrs.get("factors") or [])
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    chosen, _ = choose_responses(df, responses, factors)
    data = factorial_rows(df, factors)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, block=block, adjust="none")
    lines = [f"{df.attrs.get('experiment', '')}: replicates needed to detect a main effect of {effect:g} "
             f"(high minus low, two-level factor) with {target_power:.0%} power at alpha {alpha}"]
    for r, res in results.items():
        s = sensitivity(data, res, factors, alpha)
        if s is None:
            lines.append(f"  {r}: no residual sigma (unreplicated sweep); run at least 2 replicates first")
            continue
        now = power.power(effect, s.sigma, s.n_cells, s.replicates, alpha)
        head = (f"  {r}: sigma {s.sigma:.4g} over {s.n_cells} cells; this sweep ({s.replicates} replicates) "
                f"had power {now:.2f}; ")
        try:
            need = power.replicates_needed(effect, s.sigma, s.n_cells, alpha, target_power)
        except ValueError:
            lines.append(head + f"needed: more than {power.MAX_REPLICATES} replicates")
            continue
        lines.append(head + f"needed: {need} replicates ({need * s.n_cells} runs)")
    return "\n".join(lines)
