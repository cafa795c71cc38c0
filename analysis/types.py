"""The analysis' typed results that travel between the statistics, the renderer and the
store writer: a sweep's whole attribution (`Report`). The parts it holds are typed where
they are computed: `ResponseResult` (attribution.py), `Decision` and its verdicts
(verdicts.py), `Split` (variance.py), `LookResult` (sequential.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .attribution import ResponseResult
from .sequential import LookResult
from .verdicts import Decision


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
