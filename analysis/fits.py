"""Every response's fit and variance model for one look, fitted once (`Models`,
`response_models`: the look's information fraction needs the noise split before any verdict),
and how `analysis.verdicts.decide_all` decides beyond the runs (`DecideSettings`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from trials.registry import Registry

from . import variance
from .coded_design import factorial_rows, with_value
from .looks import PlanPrices
from .model import Fit, fit_response
from .variance import Split


def default_terms(factors: list[str], control: str | None, contrasts: dict | None = None) -> list[str]:
    """The family's terms when a spec names none: every main effect, every named contrast and
    the control."""
    return list(factors) + list(contrasts or {}) + ([control.split("=", 1)[-1]] if control else [])


@dataclass
class Models:
    """Every response's runs, OLS and variance model (`analysis.variance`), fitted once for
    the look (whose information fraction needs the noise split) and the verdicts."""
    data: pd.DataFrame  # the factorial runs
    block: str | None
    rows: dict[str, pd.DataFrame]  # each response on the runs that hold it
    fits: dict[str, Fit]
    models: dict[str, variance.Model]

    def split(self, response: str) -> Split | None:
        return variance.split_of(self.models[response]) if response in self.models else None


def response_models(df: pd.DataFrame, responses: list[str], factors: list[str],
                    rules: Registry | None = None) -> Models:
    """The responses' fits and variance models, before any block-by-term test."""
    data = factorial_rows(df, factors)
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    rows = {r: with_value(data, r) for r in responses}
    fits = {r: fit_response(rows[r], r, factors, block) for r in responses}
    models = {r: variance.build(rows[r], r, fits[r], [], rules, block_tests=False) for r in responses}
    return Models(data, block, rows, fits, models)


@dataclass(frozen=True)
class DecideSettings:
    """How `decide_all` decides, beyond the runs, responses, factors, margins and alpha.
    `adjust`: bonferroni or none. The family's terms: `primary_terms`, or every main effect,
    named contrast (`contrasts`: the spec's, `named_contrast`) and the `control`. Errors:
    each response's variance model (`analysis.variance`: own block x term, or pooled where
    `block_errors` says so, plus items x term); `block_tests` False: pooled run-level errors.
    `rules`: the workload's registry; `models`: fitted already (`response_models`); `plan`:
    what the sweep's plan still allows, which next steps are priced within (`PlanPrices`).
    `levels(response, alpha*)`: this look's nominal two- and one-sided levels and their look
    (`LookResult.levels`; alpha* where None); `binding`: what earlier looks decided
    ("response|term" -> the verdict), which stands; `frozen`: why this analysis tests nothing
    left open (a look shown as recorded, re-timed since)."""
    adjust: str = "bonferroni"
    control: str | None = None
    primary_terms: list[str] | None = None
    block_tests: bool = True
    rules: Registry | None = None
    contrasts: dict | None = None
    models: Models | None = None
    plan: PlanPrices | None = None
    block_errors: str = "own"
    levels: Callable[[str, float], tuple[float, float, int]] | None = None
    binding: dict[str, dict] | None = None
    frozen: str = ""
