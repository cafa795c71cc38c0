"""The attribution report: one self-contained HTML file (images embedded), a Markdown
summary with the same tables, and a terminal summary. Per response it says which of the
factors moved it, by how much, with what confidence, and, for every term not detected,
how large an effect the sweep could have detected (its power).

The header says which question the sweep answers (the seed's system or the paper's
architecture, from the runs' parallel stage). A response that is degenerate by
construction in that stage is named and not ranked.
"""

from __future__ import annotations

import base64
import html
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from . import plots, power
from .anova import AnalysisError
from .attribution import (DEFAULT_RESPONSES_BY_STAGE, QUESTIONS, ResponseResult, analyse,
                          better_direction, control_contrast, degenerate_reason, dunnett_vs_control, significant_effects, stage_of)
from .design import alias_structure, design_matrix, factorial_rows, levels
from .load import report_incomplete, responses as metric_columns

POWER = 0.8
DRIFT_ALPHA = 0.01  # a check run on every response: flag only clear trends


@dataclass
class Sensitivity:
    """What a response's sweep could detect: residual sigma and detectable effects."""
    sigma: float
    n_cells: int
    replicates: int
    detectable: float  # a two-level main effect (high minus low) at 80% power
    by_term: dict[str, float] = field(default_factory=dict)


@dataclass
class Report:
    results: dict[str, ResponseResult]
    summary: str
    html_path: Path | None
    skipped: list[str]
    dunnett: dict[str, pd.DataFrame]
    stage: str | None = None
    control: dict[str, dict] = field(default_factory=dict)  # response -> pooled contrast vs the control
    sensitivity: dict[str, Sensitivity] = field(default_factory=dict)
    drift: dict[str, tuple[float, float]] = field(default_factory=dict)  # response -> (slope per run, p)
    markdown_path: Path | None = None


def choose_responses(df: pd.DataFrame, asked: list[str] | None, factors: list[str]) -> tuple[list[str], list[str]]:
    """Asked responses are checked strictly (errors surface later); by default, the
    stage's primary responses that exist and vary, the others listed as skipped with the
    reason. Degenerate responses are never analysed: they are listed as skipped."""
    stage = stage_of(df)
    chosen, skipped = [], []
    if asked:
        for r in asked:
            reason = degenerate_reason(stage, r)
            if reason:
                skipped.append(f"{r} (not ranked: {reason})")
            else:
                chosen.append(r)
        if not chosen:
            raise AnalysisError(f"every response asked is degenerate in the {stage} stage: {'; '.join(skipped)}")
        return chosen, skipped
    have = set(metric_columns(df))
    data = factorial_rows(df, factors)
    degenerate = sorted(c for c in have if degenerate_reason(stage, c))
    if degenerate:  # say so, once, even when nobody asked for them
        shown = ", ".join(degenerate[:4]) + (f" and {len(degenerate) - 4} more" if len(degenerate) > 4 else "")
        skipped.append(f"{shown} (not ranked: {degenerate_reason(stage, degenerate[0])})")
    defaults = DEFAULT_RESPONSES_BY_STAGE.get(stage or "") or tuple(
        dict.fromkeys(r for rs in DEFAULT_RESPONSES_BY_STAGE.values() for r in rs))
    for r in defaults:
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


def _n_levels(data: pd.DataFrame, f: str) -> int:
    return int(data[f].dropna().nunique())


def sensitivity(data: pd.DataFrame, res: ResponseResult, factors: list[str], alpha: float) -> Sensitivity | None:
    """Residual sigma of the fitted model and, from `analysis.power`, the smallest effect
    each term could be detected at with 80% power (None for an unreplicated sweep)."""
    sigma = res.anova.attrs.get("sigma", float("nan"))
    n_cells = int(data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups)
    reps = int(data["replicate"].nunique()) if "replicate" in data.columns else 1
    if reps < 2 or not (np.isfinite(sigma) and sigma > 0) or n_cells < 2:
        return None
    base = power.detectable_effect(sigma, n_cells, reps, alpha, POWER)
    by_term = {}
    for term in res.anova.index:
        if term in ("Residual", res.block):
            continue
        L = max(_n_levels(data, f) for f in term.split(":"))
        by_term[term] = base if L == 2 else power.detectable_effect(sigma, n_cells, reps, alpha, POWER, levels=L)
    return Sensitivity(float(sigma), n_cells, reps, float(base), by_term)


def _term_words(term: str, data: pd.DataFrame) -> str:
    L = max(_n_levels(data, f) for f in term.split(":"))
    return "" if L == 2 else f" (a difference between two of its {L} levels)"


def summarise(results: dict[str, ResponseResult], alpha: float = 0.05,
              sens: dict[str, Sensitivity] | None = None, data: pd.DataFrame | None = None,
              drift: dict[str, tuple[float, float]] | None = None) -> str:
    sens, drift = sens or {}, drift or {}
    lines = []
    for r, res in results.items():
        s = sens.get(r)
        head = f"{r} ({better_direction(r)} is better; Type {res.typ}{'' if res.balanced else ', unbalanced'}"
        if s is not None:
            head += f"; residual sigma {s.sigma:.3g}, {s.n_cells} cells x {s.replicates} replicates"
        lines.append(head + ")")
        sig = significant_effects(res, alpha)
        sig_terms = set(sig["term"]) if not sig.empty else set()
        for row in sig.itertuples():
            if hasattr(row, "effect") and np.isfinite(getattr(row, "effect", np.nan)):
                lines.append(f"    {row.term}: {row.effect:+.4g} [{row.ci_low:+.4g}, {row.ci_high:+.4g}] "
                             f"p_adj={row.p_adj:.2g}")
            else:
                lines.append(f"    {row.term}: moved it (eta_p^2 {row.partial_eta_sq:.2f}) p_adj={row.p_adj:.2g}")
                if data is not None and ":" not in row.term and s is not None:
                    lines.append("        level means: " + level_means_text(data, r, row.term, s.sigma, s.replicates,
                                                                           s.n_cells))
        for term in res.anova.index:
            if term in ("Residual", res.block) or term in sig_terms:
                continue
            estimate = ""
            if data is not None and s is not None and ":" not in term:
                if _n_levels(data, term) == 2:
                    estimate = " (" + main_effect_text(data, r, term, s) + ")"
                else:
                    estimate = " (level means " + level_means_text(data, r, term, s.sigma, s.replicates,
                                                                   s.n_cells) + ")"
            if s is not None and term in s.by_term:
                words = _term_words(term, data) if data is not None else ""
                lines.append(f"    {term}: not detected{estimate}; this sweep detects {s.by_term[term]:.3g} or more"
                             f"{words} with {POWER:.0%} power")
            else:
                lines.append(f"    {term}: not detected{estimate} (unreplicated: no power estimate)")
        if r in drift:
            slope, p = drift[r]
            flag = "  <- drift" if p < DRIFT_ALPHA else ""
            lines.append(f"    drift check: residual slope {slope:+.3g} per run within blocks, p={p:.2g}{flag}")
        for note in res.warnings:
            lines.append(f"    note: {note}")
    return "\n".join(lines)


def main_effect_text(data: pd.DataFrame, response: str, factor: str, s: Sensitivity) -> str:
    """High mean minus low mean of a two-level factor (its levels in the spec's order) with
    a 95% CI from the model's residual sigma; the form `factorial_effects` gives when
    every factor has two levels."""
    present = [lv for lv in levels(data, factor) if (data[factor] == lv).any()]
    lo, hi = (data.loc[data[factor] == lv, response] for lv in present[:2])
    effect = hi.mean() - lo.mean()
    se = s.sigma * np.sqrt(1 / len(hi) + 1 / len(lo))
    t = stats.t.ppf(0.975, power.residual_df(s.n_cells, s.replicates))
    return f"{present[0]} -> {present[1]}: {effect:+.3g} [{effect - t * se:+.3g}, {effect + t * se:+.3g}]"


def level_means_text(data: pd.DataFrame, response: str, factor: str, sigma: float, replicates: int,
                     n_cells: int) -> str:
    """Each level's mean with a 95% CI from the model's residual sigma (a factor of more
    than two levels has no single high-minus-low effect)."""
    df_resid = power.residual_df(n_cells, replicates)
    t = stats.t.ppf(0.975, df_resid) if df_resid > 0 else float("nan")
    parts = []
    for level, g in data.groupby(factor, observed=True)[response]:
        half = t * sigma / np.sqrt(len(g))
        parts.append(f"{level} {g.mean():.4g} [{g.mean() - half:.4g}, {g.mean() + half:.4g}]")
    return "; ".join(parts)


def residuals(data: pd.DataFrame, res: ResponseResult) -> pd.Series:
    idx = res.anova.attrs.get("resid_index", [])
    return pd.Series(res.anova.attrs.get("resid", []), index=idx, dtype=float)


def drift_check(data: pd.DataFrame, res: ResponseResult) -> tuple[float, float] | None:
    """Least-squares slope of the model's residuals on the run order, and its p-value.
    The replicate blocks already absorb drift between blocks, so the order is centred
    inside each block: the slope is the drift left within blocks, which the model does
    not remove and which randomisation turns into noise rather than bias."""
    if "run_order" not in data.columns:
        return None
    resid = residuals(data, res)
    order = pd.to_numeric(data.loc[resid.index, "run_order"], errors="coerce")
    ok = order.notna() & (order >= 0)
    if res.block and res.block in data.columns:
        order = order - order.groupby(data.loc[resid.index, res.block]).transform("mean")
    if ok.sum() < 3 or order[ok].nunique() < 3:
        return None
    fit = stats.linregress(order[ok].to_numpy(float), resid[ok].to_numpy(float))
    return float(fit.slope), float(fit.pvalue)


def _control_table(df: pd.DataFrame, response: str, control: str) -> pd.DataFrame:
    d = dunnett_vs_control(df, response, control)
    base = pd.to_numeric(df.loc[df["cell"] == control, response]).mean()
    d["diff_pct"] = 100.0 * d["diff"] / base if base else np.nan
    return d


def build_report(df: pd.DataFrame, out: str | Path | None, responses: list[str] | None = None,
                 adjust: str = "holm", typ: int | None = None, alpha: float = 0.05) -> Report:
    factors = list(df.attrs.get("factors") or [])
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    if len(df) == 0:
        raise AnalysisError("no finished runs to analyse")
    stage = stage_of(df)
    chosen, skipped = choose_responses(df, responses, factors)
    data = factorial_rows(df, factors)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    results = analyse(df, chosen, factors, typ=typ, block=block, adjust=adjust)
    sens, drift = {}, {}
    for r, res in results.items():
        s = sensitivity(data, res, factors, alpha)
        if s is not None:
            sens[r] = s
        d = drift_check(data, res)
        if d is not None:
            drift[r] = d
    dunnett, pooled = {}, {}
    controls = sorted(c for c in df["cell"].unique() if str(c).startswith("control="))
    if controls:
        for r in chosen:
            try:
                dunnett[r] = _control_table(df, r, controls[0])
                pooled[r] = control_contrast(df, r, controls[0], alpha=alpha)
            except AnalysisError:
                pass
    summary = header_text(df, stage, factors) + "\n" + summarise(results, alpha, sens, data, drift)
    for r, c in pooled.items():
        summary += (f"\n{r}: every factorial arm against {controls[0]} (pooled, replicate as block): "
                    f"{c['diff']:+.4g} ({100 * c['rel']:+.1f}% of the control's {c['control_mean']:.4g}) "
                    f"[{c['ci_low']:+.4g}, {c['ci_high']:+.4g}] p={c['p']:.2g}")
    if dunnett:
        summary += "\neach arm against the control (Dunnett): see the report"
    inc = report_incomplete(df)
    if inc:
        summary += "\n" + inc
    if skipped:
        summary += "\nskipped: " + "; ".join(skipped)
    rep = Report(results, summary, None, skipped, dunnett, stage=stage, control=pooled, sensitivity=sens,
                 drift=drift)
    if out is not None:
        out = Path(out)
        rep.html_path = write_html(df, rep, factors, out, alpha)
        rep.markdown_path = write_markdown(df, rep, factors, out / "report.md", alpha)
    return rep


def header_text(df: pd.DataFrame, stage: str | None, factors: list[str]) -> str:
    data = factorial_rows(df, factors)
    q = QUESTIONS.get(stage or "")
    lines = [f"experiment {df.attrs.get('experiment', '')}: "
             + (f"the question is {q[0]} ({q[1]})" if q else "parallel stage mixed or unknown")]
    if df.attrs.get("description"):
        lines.append(f"sweep: {df.attrs['description']}")
    reps = data["replicate"].nunique() if len(data) else 0
    lines.append(f"{len(data)} finished factorial runs ({len(df) - len(data)} control), factors "
                 f"{', '.join(factors)}, {reps} replicate(s) as blocks, run order randomised within each block; "
                 "p-values adjusted across responses (p_adj); CIs are 95% and unadjusted")
    return "\n".join(lines)


# ---------------------------------------------------------------- HTML and Markdown

def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(path).stem)}">'


def _table_html(df: pd.DataFrame) -> str:
    return df.to_html(float_format=lambda v: _fmt(v), na_rep="", border=0, classes="t")


def cell_means(data: pd.DataFrame, response: str, factors: list[str]) -> pd.DataFrame:
    g = data.groupby(factors, observed=True)[response]
    return pd.DataFrame({"n": g.count(), "mean": g.mean(), "sd": g.std()})


UI_BASE = "http://127.0.0.1:5000"  # `mlflow ui` on the same store, as the README starts it


def run_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("run_order", "run_name", "cell", "replicate", "seed", "run_id") if c in df.columns]
    return df[cols].sort_values("run_order" if "run_order" in cols else cols[0]).reset_index(drop=True)


def _run_table_html(df: pd.DataFrame) -> str:
    """The runs in launch order, each name linked to its run in the MLflow UI."""
    t = run_table(df)
    exp_id = df.attrs.get("experiment_id")
    rows = ["<table class='t'><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in t.columns) + "</tr>"]
    for rec in t.itertuples(index=False):
        cells = []
        for c, v in zip(t.columns, rec):
            text = html.escape(str(v))
            if c == "run_name" and exp_id and "run_id" in t.columns:
                url = f"{UI_BASE}/#/experiments/{exp_id}/runs/{rec.run_id}"
                text = f"<a href='{html.escape(url)}'>{text}</a>"
            cells.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(rows) + "</table>"


def write_html(df: pd.DataFrame, rep: Report, factors: list[str], out: Path, alpha: float) -> Path:
    """One self-contained file: every plot is embedded (written atomically)."""
    out.mkdir(parents=True, exist_ok=True)
    data = factorial_rows(df, factors)
    esc = html.escape
    header = header_text(df, rep.stage, factors)
    body = rep.summary[len(header):].lstrip("\n") if rep.summary.startswith(header) else rep.summary
    parts = [f"<h1>Attribution: {esc(str(df.attrs.get('experiment', '')))}</h1>",
             "".join(f"<p>{esc(line)}</p>" for line in header.splitlines()),
             "<h2>Summary</h2>", f"<pre>{esc(body)}</pre>"]
    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp)
        for i, (r, res) in enumerate(rep.results.items()):
            parts += _response_html(data, r, res, rep, factors, img, f"r{i}", alpha)
        if any(c.startswith("spec/accept@") for c in df.columns):
            p = plots.acceptance_curves(df, img / "acceptance_curves.png")
            parts.append(f"<h2>Per-slot acceptance</h2>{_img(p)}")
    coded = design_matrix(data, factors)
    parts.append("<h2>Design</h2>" + _table_html(coded))
    parts.append(f"<p>Design {esc(df.attrs.get('design') or 'full')}; alias structure (aliased terms are "
                 "left out of the ANOVA, noted per response):</p><pre>"
                 + esc("\n".join(alias_structure(coded))) + "</pre>")
    parts.append("<h2>Runs in launch order</h2><p>Names link to the runs in the MLflow UI "
                 f"(<code>mlflow ui</code> on the same store, {UI_BASE}).</p>" + _run_table_html(df))
    style = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table.t{border-collapse:collapse}"
             "table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
             "img{max-width:100%;display:block;margin:8px 0}pre{white-space:pre-wrap}</style>")
    path = out / "report.html"
    tmp_path = path.with_suffix(".html.tmp")
    tmp_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>attribution</title>{style}"
                        f"</head><body>{''.join(parts)}</body></html>")
    tmp_path.replace(path)
    return path


def _response_html(data: pd.DataFrame, r: str, res: ResponseResult, rep: Report, factors: list[str],
                   img: Path, slug: str, alpha: float) -> list[str]:
    """One response's section: sensitivity, ANOVA, cell means, effects, the control
    comparisons and its plots (written to `img`, embedded)."""
    esc = html.escape
    parts = [f"<h2>{esc(r)} <small>({better_direction(r)} is better)</small></h2>"]
    s = rep.sensitivity.get(r)
    if s is not None:
        parts.append(f"<p>Residual sigma {s.sigma:.4g} ({s.n_cells} cells x {s.replicates} replicates); "
                     f"a two-level main effect of {s.detectable:.4g} or more is detected with "
                     f"{POWER:.0%} power at alpha {alpha}.</p>")
    parts.append(f"<h3>ANOVA (Type {res.typ}; p_adj adjusted across responses)</h3>" + _table_html(res.anova))
    parts += [f"<p><em>{esc(note)}</em></p>" for note in res.warnings]
    parts.append("<h3>Cell means</h3>" + _table_html(cell_means(data, r, factors)))
    figs = [plots.main_effects(data, r, factors, img / f"{slug}_main.png")]
    if len(factors) > 1:
        figs.append(plots.interactions(data, r, factors, img / f"{slug}_interactions.png"))
    if res.effects is not None:
        parts.append("<h3>Effects (high mean minus low mean; 95% CI unadjusted, p_adj adjusted)</h3>"
                     + _table_html(res.effects.drop(columns=["order"])))
        lv = res.effects.attrs.get("levels", {})
        parts.append("<p>low -> high: " + esc(", ".join(f"{f}: {a} -> {b}" for f, (a, b) in lv.items())) + "</p>")
        figs.append(plots.pareto(res.effects, img / f"{slug}_pareto.png", alpha))
        figs.append(plots.half_normal(res.effects, img / f"{slug}_halfnormal.png"))
    if r in rep.control:
        c = rep.control[r]
        parts.append(f"<h3>Every factorial arm against the control (pooled, replicate as block)</h3>"
                     f"<p>{c['diff']:+.4g} ({100 * c['rel']:+.1f}% of the control mean {c['control_mean']:.4g}), "
                     f"95% CI [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}], p={c['p']:.2g}; "
                     f"{c['n_factorial']} factorial runs, {c['n_control']} control runs.</p>")
    if r in rep.dunnett:
        parts.append("<h3>Each arm against the control (Dunnett; diff_pct relative to the control mean)</h3>"
                     + _table_html(rep.dunnett[r]))
    resid = residuals(data, res)
    if "run_order" in data.columns and len(resid):
        order = pd.to_numeric(data.loc[resid.index, "run_order"]).to_numpy(float)
        figs.append(plots.residuals_vs_order(order, resid.to_numpy(float), r, img / f"{slug}_drift.png"))
    return parts + [_img(p) for p in figs]


def _md_table(df: pd.DataFrame) -> str:
    df = df.reset_index()
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) if isinstance(v, (float, np.floating)) else str(v) for v in row) + " |")
    return "\n".join(lines)


def write_markdown(df: pd.DataFrame, rep: Report, factors: list[str], path: Path, alpha: float) -> Path:
    data = factorial_rows(df, factors)
    parts = [f"# Attribution: {df.attrs.get('experiment', '')}", "", header_text(df, rep.stage, factors), "",
             "## Summary", "", "```", rep.summary, "```"]
    for r, res in rep.results.items():
        parts += ["", f"## {r} ({better_direction(r)} is better)", ""]
        s = rep.sensitivity.get(r)
        if s is not None:
            parts += [f"Residual sigma {s.sigma:.4g}; detectable effect (two-level main effect, "
                      f"{POWER:.0%} power, alpha {alpha}): {s.detectable:.4g}.", ""]
            parts += ["Detectable effect per term: " + ", ".join(f"{t} {v:.3g}" for t, v in s.by_term.items()), ""]
        parts += [f"ANOVA (Type {res.typ}):", "", _md_table(res.anova), ""]
        if res.effects is not None:
            parts += ["Effects (high minus low, 95% CI):", "",
                      _md_table(res.effects[["effect", "se", "ci_low", "ci_high", "p", "p_adj"]]), ""]
        parts += ["Cell means:", "", _md_table(cell_means(data, r, factors)), ""]
        if r in rep.control:
            c = rep.control[r]
            parts += [f"Every factorial arm against the control (pooled, replicate as block): {c['diff']:+.4g} "
                      f"({100 * c['rel']:+.1f}% of {c['control_mean']:.4g}), 95% CI [{c['ci_low']:+.4g}, "
                      f"{c['ci_high']:+.4g}], p={c['p']:.2g}.", ""]
        if r in rep.dunnett:
            parts += ["Each arm against the control (Dunnett):", "", _md_table(rep.dunnett[r]), ""]
    coded = design_matrix(data, factors)
    parts += ["", "## Design", "", f"Design {df.attrs.get('design') or 'full'}, coded (-1/+1: first/second level):",
              "", _md_table(coded), "", "Alias structure:", "", "```", *alias_structure(coded), "```"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
    return path


def log_to_parent(rep: Report, df: pd.DataFrame, tracking_uri: str | None) -> int:
    """The attribution on the sweep's parent run: every effect with its CI and adjusted p
    as metrics `attribution/<response>/<term>` (and `/ci_low`, `/ci_high`, `/p_adj`), each
    response's sigma and detectable effect, and the report files as artifacts. Returns how
    many metrics were logged."""
    import time

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    parent = df.attrs.get("parent_run_id")
    if not parent:
        raise AnalysisError("these runs have no parent run to log the attribution on")
    client = MlflowClient(tracking_uri)
    ts = int(time.time() * 1000)
    metrics = []

    def add(name, value):
        if value is not None and np.isfinite(value):
            metrics.append(Metric(name.replace("@", ":"), float(value), ts, 0))

    for r, res in rep.results.items():
        s = rep.sensitivity.get(r)
        if s is not None:
            add(f"attribution/{r}/sigma", s.sigma)
            add(f"attribution/{r}/detectable", s.detectable)
        if res.effects is not None:
            for term, row in res.effects.iterrows():
                for suffix, key in (("", "effect"), ("/ci_low", "ci_low"), ("/ci_high", "ci_high"),
                                    ("/p_adj", "p_adj")):
                    add(f"attribution/{r}/{term}{suffix}", row.get(key))
        if r in rep.control:
            add(f"attribution/{r}/vs_control", rep.control[r]["diff"])
            add(f"attribution/{r}/vs_control_rel", rep.control[r]["rel"])
    for i in range(0, len(metrics), 900):
        client.log_batch(parent, metrics=metrics[i:i + 900])
    for path in (rep.html_path, rep.markdown_path):
        if path is not None:
            client.log_artifact(parent, str(path), artifact_path="attribution")
    return len(metrics)
