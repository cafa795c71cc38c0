"""The stopping rule for a sweep analysed look after look (`trials augment --until-decided`).

Each look decides every term again; without a correction, repeated looks would inflate
false verdicts. The rule here is Lan-DeMets alpha spending with the Pocock-type spending
function

    spent(t) = alpha * ln(1 + (e - 1) t),   t = replicate blocks so far / the maximum,

(Lan & DeMets 1983; Kim & DeMets 1987), and each look k tests at the alpha it spends,
alpha_k = spent(t_k) - spent(t_{k-1}). Inside a look that alpha is split over the family as
always (Bonferroni), for the test of "no effect" and for the equivalence test alike. By the
union bound over looks, the chance of any false "matters" (or any false "negligible")
across all looks is at most spent(1) = alpha, whatever the correlation between looks:
conservative, and simple to check. The maximum number of blocks is fixed at the first look
(the information scale needs a fixed end). A repeated analysis at the same number of blocks
is the same look and spends nothing more. Pocock-type spending rather than O'Brien-Fleming:
the point of a look is to stop early, and O'Brien-Fleming spends almost nothing on early
looks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from .load import SweepRecord

RULE = "Lan-DeMets alpha spending, Pocock-type, Bonferroni across looks"


def spent(t: float, alpha: float) -> float:
    """The alpha spent by information fraction t (0 <= t <= 1)."""
    if not 0 <= t <= 1:
        raise ValueError(f"information fraction must lie in [0, 1], got {t!r}")
    return alpha * math.log(1 + (math.e - 1) * t)


@dataclass
class Plan:
    """A sweep's looks: the maximum number of replicate blocks and the block counts at
    which it was analysed, in order."""
    max_replicates: int
    alpha: float = 0.05
    looks: list[int] = field(default_factory=list)
    rule: str = RULE

    def __post_init__(self):
        if not (isinstance(self.max_replicates, int) and self.max_replicates >= 2):
            raise ValueError(f"max_replicates: an integer >= 2, got {self.max_replicates!r}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha: must lie in (0, 1), got {self.alpha!r}")

    def look(self, replicates: int) -> float:
        """Record a look at `replicates` blocks (once) and return the alpha it tests at."""
        if replicates > self.max_replicates:
            raise ValueError(f"{replicates} replicate blocks exceed the plan's maximum of {self.max_replicates}")
        if self.looks and replicates < self.looks[-1]:
            raise ValueError(f"a look at {replicates} blocks comes after one at {self.looks[-1]}")
        if not self.looks or replicates != self.looks[-1]:
            self.looks.append(replicates)
        return self.alpha_at(len(self.looks) - 1)

    def alpha_at(self, k: int) -> float:
        """The alpha look k (0-based) tests at."""
        t = self.looks[k] / self.max_replicates
        before = self.looks[k - 1] / self.max_replicates if k > 0 else 0.0
        return spent(t, self.alpha) - spent(before, self.alpha)

    def to_json(self) -> str:
        return json.dumps({"rule": self.rule, "alpha": self.alpha, "max_replicates": self.max_replicates,
                           "looks": self.looks})

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        d = json.loads(text)
        return cls(int(d["max_replicates"]), float(d["alpha"]), [int(n) for n in d.get("looks", [])])


def look_alpha(df: pd.DataFrame, data: pd.DataFrame, alpha: float | None) -> tuple[float, str]:
    """The alpha of this analysis and, for a sweep under the sequential rule, what it is."""
    if alpha is not None:
        return alpha, ""
    record = SweepRecord.of(df)
    if not record.sequential:
        return 0.05, ""
    plan = Plan.from_json(record.sequential)
    n = int(data["replicate"].nunique())
    a = plan.look(n)
    return a, (f"sequential rule ({plan.rule}): look {len(plan.looks)} at {n} of at most {plan.max_replicates} "
               f"replicate blocks tests at alpha {a:.3g} of the sweep's {plan.alpha:g}")
