"""The attribution report: HTML (tables and plots) and a terminal summary that says, per
response, which of the factors moved it, by how much, with what confidence."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import plots
from .anova import AnalysisError
from .attribution import DEFAULT_RESPONSES, ResponseResult, analyse, dunnett_vs_control, significant_effects
from .load import load_runs, report_incomplete, responses as metric_columns


@dataclass
class Report:
    results: dict[str, ResponseResult]
    summary: str
    html_path: Path | None
    skipped: list[str]
    dunnett: dict[str, pd.DataFrame]


def choose_responses(df: pd.DataFrame, asked: list[str] | None, factors: list[str]) -> tuple[list[str], list[str]]:
    """Asked responses are checked strictly (errors surface later); by default, the usual
    responses that exist and vary, the others listed as skipped with the reason."""
    if asked:
        return list(asked), []
    have = set(metric_columns(df))
    chosen, skipped = [], []
    data = df.dropna(subset=factors)
    for r in DEFAULT_RESPONSES:
        if r not in have:
            continue
        if data[r].nunique() <= 1:
            skipped.append(f"{r} (constant across runs)")
        else:
            chosen.append(r)
    if not chosen:
        raise AnalysisError("no default response varies across runs; name one with --responses")
    return chosen, skipped


def _fmt(x, digits=4):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, (float, np.floating)) else str(x)


def summarise(results: dict[str, ResponseResult], alpha: float = 0.05) -> str:
    lines = []
    for r, res in results.items():
        sig = significant_effects(res, alpha)
        head = f"{r}  (Type {res.typ}{'' if res.balanced else ', unbalanced'})"
        if sig.empty:
            lines.append(f"{head}: no term significant at {alpha} (adjusted)")
        else:
            parts = []
            for row in sig.itertuples():
                if hasattr(row, "effect") and np.isfinite(getattr(row, "effect", np.nan)):
                    parts.append(f"{row.term} {row.effect:+.4g} [{row.ci_low:+.4g}, {row.ci_high:+.4g}] p={row.p_adj:.2g}")
                else:
                    parts.append(f"{row.term} (eta_p^2 {row.partial_eta_sq:.2f}) p={row.p_adj:.2g}")
            lines.append(f"{head}: " + "; ".join(parts))
        for note in res.warnings:
            lines.append(f"    note: {note}")
    return "\n".join(lines)


def _table_html(df: pd.DataFrame) -> str:
    return df.to_html(float_format=lambda v: _fmt(v), na_rep="", border=0, classes="t")


def build_report(df: pd.DataFrame, out: str | Path | None, responses: list[str] | None = None,
                 adjust: str = "holm", typ: int | None = None, alpha: float = 0.05) -> Report:
    factors = list(df.attrs.get("factors") or [])
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    if len(df) == 0:
        raise AnalysisError("no finished runs to analyse")
    chosen, skipped = choose_responses(df, responses, factors)
    block = "replicate" if df.dropna(subset=factors)["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, typ=typ, block=block, adjust=adjust)
    dunnett = {}
    controls = sorted(c for c in df["cell"].unique() if str(c).startswith("control="))
    if controls:
        for r in chosen:
            try:
                dunnett[r] = dunnett_vs_control(df, r, controls[0])
            except AnalysisError:
                pass
    summary = summarise(results, alpha)
    inc = report_incomplete(df)
    if inc:
        summary += "\n" + inc
    if skipped:
        summary += "\nskipped: " + ", ".join(skipped)
    html_path = None
    if out is not None:
        html_path = write_html(df, results, dunnett, factors, Path(out), summary)
    return Report(results, summary, html_path, skipped, dunnett)


def write_html(df, results, dunnett, factors, out: Path, summary: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    img = out / "img"
    data = df.dropna(subset=factors)
    parts = [f"<h1>Attribution: {html.escape(str(df.attrs.get('experiment', '')))}</h1>",
             f"<p>{len(data)} finished factorial runs, factors {', '.join(factors)}; "
             f"replicate as block where replicated; p-values adjusted across responses.</p>",
             f"<pre>{html.escape(summary)}</pre>"]
    for i, (r, res) in enumerate(results.items()):
        slug = f"r{i}"
        parts.append(f"<h2>{html.escape(r)}</h2>")
        parts.append(f"<h3>ANOVA (Type {res.typ})</h3>" + _table_html(res.anova))
        for note in res.warnings:
            parts.append(f"<p><em>{html.escape(note)}</em></p>")
        figs = [plots.main_effects(data, r, factors, img / f"{slug}_main.png")]
        if len(factors) > 1:
            figs.append(plots.interactions(data, r, factors, img / f"{slug}_interactions.png"))
        if res.effects is not None:
            parts.append("<h3>Effects (high minus low, 95% CI)</h3>" + _table_html(res.effects.drop(columns=["order"])))
            lv = res.effects.attrs.get("levels", {})
            parts.append("<p>low -> high: " + html.escape(", ".join(f"{f}: {a} -> {b}" for f, (a, b) in lv.items()))
                         + "</p>")
            figs.append(plots.pareto(res.effects, img / f"{slug}_pareto.png"))
            figs.append(plots.half_normal(res.effects, img / f"{slug}_halfnormal.png"))
        if r in dunnett:
            parts.append("<h3>Against the control arm (Dunnett)</h3>" + _table_html(dunnett[r]))
        parts += [f'<img src="img/{p.name}" alt="{p.stem}">' for p in figs]
    if any(c.startswith("spec/accept@") for c in df.columns):
        p = plots.acceptance_curves(df, img / "acceptance_curves.png")
        parts.append(f'<h2>Per-slot acceptance</h2><img src="img/{p.name}" alt="acceptance">')
    style = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table.t{border-collapse:collapse}"
             "table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
             "img{max-width:100%;display:block;margin:8px 0}</style>")
    path = out / "report.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>attribution</title>{style}</head>"
                    f"<body>{''.join(parts)}</body></html>")
    return path


def report(experiment: str, tracking_uri: str | None = None, out: str | Path | None = "reports",
           responses: list[str] | None = None, adjust: str = "holm") -> Report:
    df = load_runs(experiment, tracking_uri)
    return build_report(df, Path(out) / experiment if out is not None else None, responses, adjust)
