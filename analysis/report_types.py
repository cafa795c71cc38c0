"""What a sweep's attribution hands its renderers: each response's ANOVA and effects
(`ResponseResult`) and the whole report (`Report`: those, the family's decision, the look,
the noise split and the summary texts). The statistics' own results (`Verdict`, `Decision`,
...) are `analysis.result_types`'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .anova import ModelFit
from .looks import LookResult
from .decision import Decision


@dataclass
class ResponseResult:
    response: str
    anova: pd.DataFrame
    effects: pd.DataFrame | None
    typ: int
    balanced: bool
    warnings: list[str] = field(default_factory=list)
    block: str | None = None
    fit: ModelFit | None = None  # S, R², adjusted R², the residuals
    levels: dict[str, tuple[str, str]] = field(default_factory=dict)  # each factor's (low, high) in `effects`


@dataclass
class Report:
    results: dict[str, ResponseResult]
    summary: str
    html_path: Path | None
    skipped: list[str]
    dunnett: dict[str, pd.DataFrame]
    stage: str | None = None
    control: dict[str, dict] = field(default_factory=dict)  # response -> pooled contrast vs the control
    drift: dict[str, tuple[float, float]] = field(default_factory=dict)  # response -> (slope per run, p)
    markdown_path: Path | None = None
    decision: Decision | None = None
    look: LookResult | None = None
    noise: dict = field(default_factory=dict)  # response -> analysis.variance.Split
    brief: str = ""  # the answer in one screen (the terminal's; `summary` holds every term's detail)
    links: list[str] = field(default_factory=list)  # the confirmations run for this study (analysis.links)
