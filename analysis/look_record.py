"""One look as a sweep's plan records it (`Look`: the data it saw, its blocks and evaluation,
the information it reached, the alpha it tested at, what it decided), read back from its JSON
(`Look.from_record`), and the digest of the timed responses' values a look saw
(`timed_digest`: a timing pass run again is new data). The plan that holds the looks is
`analysis.sequential.Plan`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Look:
    """One look: the data it saw (a fingerprint), its blocks and evaluation, the information
    fraction reached and the alpha it tested at."""
    data: str
    blocks: int
    evaluation: dict = field(default_factory=dict)
    t: float = 1.0
    alpha: float = 0.05
    post_hoc: bool = False
    timed: str = ""  # a digest of the timed responses' values: a timing pass again is new data
    fractions: dict = field(default_factory=dict)  # each primary response's own information fraction
    decided: dict = field(default_factory=dict)  # "response|term" -> the verdict decided at this look (binding)
    note: str = ""  # why it decides nothing though it was taken ("not replayed: ..."), "" where it decides
    margins: dict = field(default_factory=dict)  # response -> its margin as resolved at the plan's first look

    @classmethod
    def from_record(cls, look: dict) -> Look:
        """A look as its plan's JSON records it (any missing optional field at its default)."""
        return cls(str(look.get("data", "")), int(look["blocks"]), dict(look.get("evaluation", {})),
                   float(look.get("t", 1.0)), float(look["alpha"]), bool(look.get("post_hoc")), str(look.get("timed", "")),
                   {str(k): float(v) for k, v in dict(look.get("fractions") or {}).items()},
                   {str(k): dict(v) for k, v in dict(look.get("decided") or {}).items()}, str(look.get("note") or ""),
                   {str(k): float(v) for k, v in dict(look.get("margins") or {}).items()})

    def describe(self) -> str:
        ev = ", ".join(f"{v:g} {k.replace('_', ' ')}" for k, v in self.evaluation.items())
        return f"{self.blocks} block(s)" + (f", {ev}" if ev else "")


def timed_digest(data: pd.DataFrame, timed: tuple[str, ...]) -> str:
    """A digest of the timed responses' values (the timing pass's; `timed`: the workload's,
    `Registry.timed`): a pass run again with the same settings gives other numbers, so the
    analysis after it is a new look."""
    cols = sorted(c for c in timed if c in data.columns)
    if not cols:
        return ""
    parts = [data["cell"].astype(object).map(str), data["replicate"].astype(object).map(str)]
    parts += [data[c].astype(object).map(lambda v: repr(as_number(v))) for c in cols]
    return hashlib.sha256("\n".join(sorted("|".join(r) for r in zip(*parts))).encode()).hexdigest()[:16]


def as_number(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f
