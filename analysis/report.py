"""The attribution report: one self-contained HTML file (images embedded), a Markdown
summary with the same tables, and a terminal summary. It leads with the answer: every term
of every primary response ends "matters", "negligible" or "undecided" (`analysis.verdicts`),
with the estimate and the interval the decision used, and for an undecided term what would
decide it. The details follow: the model's fit, ANOVA tables, cell means and plots.

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

from dspark.record import UI_URL, run_url

from . import plots, power
from .anova import AnalysisError
from .attribution import (DEFAULT_RESPONSES_BY_STAGE, QUESTIONS, ResponseResult, analyse, control_contrast,
                          degenerate_reason, dunnett_vs_control, stage_of)
from .anova import check_design
from .design import alias_structure, design_matrix, factorial_rows, with_value, without_value
from .load import report_incomplete, responses as metric_columns
from .sequential import look_alpha
from .variance import groups_of, split
from .verdicts import Decision, decide_all, margins_for

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
    drift: dict[str, tuple[float, float]] = field(default_factory=dict)  # response -> (slope per run, p)
    markdown_path: Path | None = None
    decision: Decision | None = None


def choose_responses(df: pd.DataFrame, asked: list[str] | None, factors: list[str],
                     primary: list[str] | None = None) -> tuple[list[str], list[str]]:
    """The primary responses (those with a margin) always, first and strictly; then the
    asked ones, checked strictly too (errors surface later); if none is asked, the stage's
    usual responses that exist and vary, the others listed as skipped with the reason.
    Degenerate responses are never analysed: they are listed as skipped."""
    stage = stage_of(df)
    primary = list(primary or [])
    for r in primary:
        reason = degenerate_reason(stage, r)
        if reason:
            raise AnalysisError(f"primary response {r} cannot be ranked in the {stage} stage: {reason}")
        if r not in df.columns:
            raise AnalysisError(f"primary response {r} is not among the runs' metrics")
    if asked:
        asked = list(dict.fromkeys(primary + list(asked)))
    chosen, skipped = list(primary), []
    if asked:
        chosen = []
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
        if r not in have or r in chosen:
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


def verdict_table_text(decision: Decision) -> str:
    """The answer at a glance: terms against the primary responses (every response where
    none is primary), each cell the verdict, the estimate and the interval it used."""
    cols = answer_columns(decision)
    grid = verdict_grid(decision, cols)
    heads = [f"{c} ({'+-' + format(decision.checks[c].margin, 'g') if decision.checks[c].margin else 'no margin'})"
             for c in cols]
    term_w = max(len("term"), *(len(str(t)) for t in grid.index))
    widths = [max(len(h), *(len(v) for v in grid[c])) for h, c in zip(heads, cols)]
    lines = ["verdicts (estimate [interval the decision used]):",
             "  " + "term".ljust(term_w) + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths))]
    for term, row in grid.iterrows():
        lines.append("  " + str(term).ljust(term_w) + "  " + "  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return "\n".join(line.rstrip() for line in lines)


def summarise(decision: Decision, results: dict[str, ResponseResult],
              drift: dict[str, tuple[float, float]] | None = None, noise: dict | None = None) -> str:
    """Per response: what its verdicts rest on, then one line per term that starts with
    `<term>: matters`, `<term>: negligible` or `<term>: undecided`."""
    drift = drift or {}
    lines = [decision.method()]
    any_margin = any(c.margin is not None for c in decision.checks.values())
    for r, check in decision.checks.items():
        res = results.get(r)
        head = check.text(decision.alpha_star)
        if res is not None and not res.balanced:
            head = head[:-1] + "; unbalanced)"
        prefix = "primary: " if check.margin is not None else "secondary: " if any_margin else ""
        lines.append(prefix + head)
        lines += [f"    {v.text()}" for v in decision.of(r)]
        lines.append(f"    {check.lobo}")
        if (noise or {}).get(r) is not None:
            lines.append(f"    noise: {noise[r].text()}")
        if r in drift:
            slope, p = drift[r]
            flag = "  <- drift" if p < DRIFT_ALPHA else ""
            lines.append(f"    drift check: residual slope {slope:+.3g} per run within blocks, p={p:.2g}{flag}")
        for note in (res.warnings if res is not None else []):
            lines.append(f"    note: {note}")
    c = decision.counts()
    kind = "primary verdicts" if any(ch.margin is not None for ch in decision.checks.values()) else "verdicts"
    lines.append(f"{kind}: {c['matters']} matters, {c['negligible']} negligible, {c['undecided']} undecided")
    return "\n".join(lines)


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
    raw = pd.to_numeric(data.loc[resid.index, "run_order"], errors="coerce")
    ok = (raw.notna() & (raw >= 0)).to_numpy()
    order = centred_order(data, res, resid)
    if ok.sum() < 3 or len(np.unique(order[ok])) < 3:
        return None
    fit = stats.linregress(order[ok], resid.to_numpy(float)[ok])
    return float(fit.slope), float(fit.pvalue)


def centred_order(data: pd.DataFrame, res: ResponseResult, resid: pd.Series) -> np.ndarray:
    """Each run's launch position centred within its replicate block (the drift the blocks
    leave), the x of both the drift check and its plot."""
    order = pd.to_numeric(data.loc[resid.index, "run_order"], errors="coerce")
    if res.block and res.block in data.columns:
        order = order - order.groupby(data.loc[resid.index, res.block]).transform("mean")
    return order.to_numpy(float)


def _control_table(df: pd.DataFrame, response: str, control: str) -> pd.DataFrame:
    """Each arm against the control: Dunnett's difference and p. Its intervals are left out:
    the verdicts' level (alpha*) is the one the report prints, and scipy's Dunnett
    interval does not converge that far out."""
    d = dunnett_vs_control(df, response, control).drop(columns=["ci_low", "ci_high"])
    base = pd.to_numeric(df.loc[df["cell"] == control, response]).mean()
    d["diff_pct"] = 100.0 * d["diff"] / base if base else np.nan
    return d


def build_report(df: pd.DataFrame, out: str | Path | None, responses: list[str] | None = None,
                 adjust: str = "bonferroni", typ: int | None = None, alpha: float | None = None,
                 margins: dict[str, float] | None = None, ui: str = UI_URL) -> Report:
    """The whole attribution of a sweep (`ui`: the MLflow UI the HTML's run links open). `margins` (`--margin`) supply or override the
    spec's; every response with a margin is primary. `alpha` None is 0.05, or, for a sweep
    analysed look after look (`trials augment --until-decided`), the alpha its spending
    rule gives the look at the current number of blocks."""
    factors = list(df.attrs.get("factors") or [])
    if not factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    if len(df) == 0:
        raise AnalysisError("no finished runs to analyse")
    stage = stage_of(df)
    declared = margins_for(df, margins)
    chosen, skipped = choose_responses(df, responses, factors, primary=list(declared))
    data = factorial_rows(df, factors)
    chosen = _analysable(data, chosen, factors, set(declared), skipped)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    fraction = _fraction(df, data, factors)
    results = analyse(df, chosen, factors, typ=typ, block=block, adjust="none", full_design=not fraction)
    alpha, look_note = look_alpha(df, data, alpha)
    controls = sorted(c for c in df["cell"].unique() if str(c).startswith("control="))
    decision = decide_all(df, chosen, factors, declared, alpha, adjust, controls[0] if controls else None)
    drift = {r: d for r, res in results.items() if (d := drift_check(data, res)) is not None}
    dunnett, pooled = _against_control(df, chosen, controls, decision.alpha_star)
    noise = {r: split(df, r, factors) for r in chosen if groups_of(df, r)}
    summary = (header_text(df, stage, factors) + "\n" + verdict_table_text(decision) + "\n"
               + summarise(decision, results, drift, noise)
               + _notes(df, data, chosen, fraction, look_note, bool(dunnett), skipped))
    rep = Report(results, summary, None, skipped, dunnett, stage=stage, control=pooled, drift=drift,
                 decision=decision)
    if out is not None:
        out = Path(out)
        rep.html_path = write_html(df, rep, factors, out, ui)
        rep.markdown_path = write_markdown(df, rep, factors, out / "report.md")
    return rep


def _against_control(df: pd.DataFrame, chosen: list[str], controls: list[str],
                     alpha_star: float) -> tuple[dict, dict]:
    """Each arm against the control (Dunnett) and the pooled contrast, per response."""
    dunnett, pooled = {}, {}
    for r in chosen if controls else []:
        try:
            dunnett[r] = _control_table(df, r, controls[0])
            pooled[r] = control_contrast(df, r, controls[0], alpha=alpha_star)
        except AnalysisError:
            pass
    return dunnett, pooled


def _notes(df: pd.DataFrame, data: pd.DataFrame, chosen: list[str], fraction: str, look_note: str,
           dunnett: bool, skipped: list[str]) -> str:
    """The summary's closing lines: the design's aliases, runs a response lacks, mixed
    evaluations, the sequential look, incomplete runs and what was skipped."""
    lines = [fraction] if fraction else []
    for r in chosen:
        missing = without_value(data, r)
        if missing:
            lines.append(f"warning: {r} is analysed on {len(data) - len(missing)} of {len(data)} runs; "
                         f"without a value: {', '.join(missing)}")
    prompts = sorted(set(pd.to_numeric(data["split/prompts"]).dropna())) if "split/prompts" in data.columns else []
    if len(prompts) > 1:
        lines.append(f"note: the runs' latest evaluations decoded different numbers of prompts "
                     f"({', '.join(f'{p:g}' for p in prompts)}): finish `trials reeval` before reading the decoding "
                     "responses")
    if look_note:
        lines.append(look_note)
    if dunnett:
        lines.append("each arm against the control (Dunnett): see the report")
    incomplete = report_incomplete(df)
    if incomplete:
        lines.append(incomplete)
    if skipped:
        lines.append("skipped: " + "; ".join(skipped))
    return "".join("\n" + line for line in lines)


def _analysable(data: pd.DataFrame, chosen: list[str], factors: list[str], primary: set[str],
                skipped: list[str]) -> list[str]:
    """The chosen responses that a model can answer on the runs holding them; a secondary one
    that cannot is skipped with its reason (the others still report), a primary one stops
    the report with it."""
    keep, errors = [], []
    for r in chosen:
        try:
            check_design(with_value(data, r), r, factors)
        except AnalysisError as e:
            if r in primary:
                raise
            errors.append(e)
            skipped.append(f"{r} ({e})")
            continue
        keep.append(r)
    if not keep:
        raise errors[0] if len(errors) == 1 else AnalysisError("no response can be analysed: " + "; ".join(skipped))
    return keep


def _fraction(df: pd.DataFrame, data: pd.DataFrame, factors: list[str]) -> str:
    """For a fractional design, the line naming its aliases (each verdict is then the sum of
    a term and its aliases); "" for a full factorial. A fraction that lost cells is refused."""
    design = str(df.attrs.get("design") or "full")
    if design == "full":
        return ""
    cells = data.groupby([data[f].astype(str) for f in factors], observed=True).ngroups
    try:
        k, p = (int(x) for x in design.removeprefix("2^(").removesuffix(")").split("-"))
    except ValueError:
        raise AnalysisError(f"design {design!r}: not 'full' or 2^(k-p)") from None
    if cells < 2 ** (k - p):
        raise AnalysisError(f"fractional design {design}: {cells} of its {2 ** (k - p)} cells have finished runs "
                            "(resume the sweep to rerun the failed trials)")
    lines = alias_structure(design_matrix(data, factors))
    return (f"fractional design {design}: each term's estimate is its sum with its aliases ("
            + "; ".join(lines) + ")")


def header_text(df: pd.DataFrame, stage: str | None, factors: list[str]) -> str:
    data = factorial_rows(df, factors)
    q = QUESTIONS.get(stage or "")
    lines = [f"experiment {df.attrs.get('experiment', '')}: "
             + (f"the question is {q[0]} ({q[1]})" if q else "parallel stage mixed or unknown")]
    if df.attrs.get("description"):
        lines.append(f"sweep: {df.attrs['description']}")
    reps = data["replicate"].nunique() if len(data) else 0
    n_control = len(df) - len(data)
    lines.append(f"{len(data)} finished factorial runs" + (f" and {n_control} control runs" if n_control else "")
                 + f", factors {', '.join(factors)}, {reps} replicate(s) as blocks, run order randomised within "
                 "each block")
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


def run_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("run_order", "run_name", "cell", "replicate", "seed", "run_id") if c in df.columns]
    return df[cols].sort_values("run_order" if "run_order" in cols else cols[0]).reset_index(drop=True)


def _run_table_html(df: pd.DataFrame, ui: str) -> str:
    """The runs in launch order, each name linked to its run in the MLflow UI at `ui`."""
    t = run_table(df)
    exp_id = df.attrs.get("experiment_id")
    rows = ["<table class='t'><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in t.columns) + "</tr>"]
    for rec in t.itertuples(index=False):
        cells = []
        for c, v in zip(t.columns, rec):
            text = html.escape(str(v))
            if c == "run_name" and exp_id and "run_id" in t.columns:
                url = run_url(exp_id, rec.run_id, ui)
                text = f"<a href='{html.escape(url)}'>{text}</a>"
            cells.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(rows) + "</table>"


# a term that matters is coloured by what it does to the response, not alarmed at
VERDICT_COLOURS = {"better": "#c8e6c9", "worse": "#f6c9c4", "negligible": "#e4e4e4", "undecided": "#f3e6b3"}


def verdict_colour(v) -> str:
    """better / worse (a term that matters: its +1 level moves the response the better or
    the worse way), negligible or undecided."""
    if v.verdict != "matters":
        return v.verdict
    if v.better not in ("higher", "lower"):
        return "undecided"
    return "better" if (v.estimate > 0) == (v.better == "higher") else "worse"


def verdict_cell(v) -> str:
    """A verdict with its estimate and the interval its decision used."""
    lo, hi = (v.eq_low, v.eq_high) if v.verdict == "negligible" else (v.ci_low, v.ci_high)
    return f"{v.verdict}: {v.estimate:+.3g} [{lo:+.3g}, {hi:+.3g}]" + (" (fragile)" if v.fragile else "")


def answer_columns(decision: Decision) -> list[str]:
    """The responses the answer is about: the primary ones, or every one where none is."""
    return [r for r, c in decision.checks.items() if c.margin is not None] or list(decision.checks)


def verdict_grid(decision: Decision, columns: list[str] | None = None) -> pd.DataFrame:
    """Terms against responses (the primary ones by default), each cell `verdict: estimate
    [interval]`."""
    cols = columns or answer_columns(decision)
    rows: dict[str, dict[str, str]] = {}
    for v in decision.verdicts:
        if v.response in cols:
            rows.setdefault(v.term, {})[v.response] = verdict_cell(v)
    return pd.DataFrame.from_dict(rows, orient="index").reindex(columns=cols).fillna("")


def _verdict_table_html(decision: Decision) -> str:
    esc = html.escape
    grid = verdict_grid(decision)
    colours = {(v.term, v.response): VERDICT_COLOURS[verdict_colour(v)] for v in decision.verdicts}
    head = "".join(f"<th>{esc(c)}<br><small>{esc(_col_note(decision.checks[c]))}</small></th>" for c in grid.columns)
    rows = []
    for term, row in grid.iterrows():
        cells = []
        for response, text in row.items():
            colour = colours.get((term, response), "#fff")
            cells.append(f"<td style='background:{colour}'>{esc(text)}</td>")
        rows.append(f"<tr><th>{esc(str(term))}</th>{''.join(cells)}</tr>")
    key = " ".join(f"<span style='background:{c};padding:0 6px'>{esc(k)}</span>" for k, c in (
        ("matters: better at the term's +1", VERDICT_COLOURS["better"]),
        ("matters: worse at +1", VERDICT_COLOURS["worse"]), ("negligible", VERDICT_COLOURS["negligible"]),
        ("undecided", VERDICT_COLOURS["undecided"])))
    key += (" <small>(+1: a factor's second level; for an interaction, the product of its factors' "
            "codes)</small>")
    return (f"<table class='t verdicts'><tr><th>term</th>{head}</tr>{''.join(rows)}</table>"
            f"<p class='key'><small>{key}</small></p>")


def _col_note(check) -> str:
    margin = f"margin ±{check.margin:g}" if check.margin is not None else "secondary, no margin"
    return f"{check.better} is better; {margin}"


def write_html(df: pd.DataFrame, rep: Report, factors: list[str], out: Path, ui: str = UI_URL) -> Path:
    """One self-contained file: every plot is embedded (written atomically). The question
    and the verdict table come first."""
    out.mkdir(parents=True, exist_ok=True)
    data = factorial_rows(df, factors)
    esc = html.escape
    d = rep.decision
    header = header_text(df, rep.stage, factors)
    body = rep.summary[len(header):].lstrip("\n") if rep.summary.startswith(header) else rep.summary
    parts = [f"<h1>Attribution: {esc(str(df.attrs.get('experiment', '')))}</h1>",
             "".join(f"<p>{esc(line)}</p>" for line in header.splitlines()[:1]),
             _verdict_table_html(d),
             f"<p><small>{esc(d.method())}. Cells: the verdict, the estimate (high minus low) and the interval "
             "the decision used (TOST's for negligible).</small></p>",
             "".join(f"<p>{esc(line)}</p>" for line in header.splitlines()[1:]),
             "<h2>Summary</h2>", f"<pre>{esc(body)}</pre>"]
    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp)
        for i, (r, res) in enumerate(rep.results.items()):
            parts += _response_html(data, r, res, rep, factors, img, f"r{i}")
        if any(c.startswith("spec/accept@") for c in df.columns):
            p = plots.acceptance_curves(df, img / "acceptance_curves.png")
            parts.append(f"<h2>Per-slot acceptance</h2>{_img(p)}")
    coded = design_matrix(data, factors)
    parts.append("<h2>Design</h2>" + _table_html(coded))
    parts.append(f"<p>Design {esc(df.attrs.get('design') or 'full')}; alias structure (aliased terms are "
                 "left out of the ANOVA, noted per response):</p><pre>"
                 + esc("\n".join(alias_structure(coded))) + "</pre>")
    parts.append("<h2>Runs in launch order</h2><p>Names link to the runs in the MLflow UI at "
                 f"{esc(ui)} (<code>analysis report --ui-url</code>).</p>" + _run_table_html(df, ui))
    style = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table.t{border-collapse:collapse}"
             "table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
             "table.verdicts td{text-align:left;white-space:nowrap}"
             "img{max-width:100%;display:block;margin:8px 0}pre{white-space:pre-wrap}</style>")
    path = out / "report.html"
    tmp_path = path.with_suffix(".html.tmp")
    tmp_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>attribution</title>{style}"
                        f"</head><body>{''.join(parts)}</body></html>")
    tmp_path.replace(path)
    return path


def verdict_rows(decision: Decision, response: str) -> pd.DataFrame:
    """One response's contrasts as the decision saw them."""
    t = decision.table()
    t = t[t["response"] == response].set_index("term")
    return t[["verdict", "estimate", "se", "df", "ci_low", "ci_high", "eq_low", "eq_high", "p", "p_adj", "p_equiv",
              "detectable", "fragile"]]


def _response_html(data: pd.DataFrame, r: str, res: ResponseResult, rep: Report, factors: list[str],
                   img: Path, slug: str) -> list[str]:
    """One response's section: what its verdicts rest on, the contrasts, ANOVA, cell means,
    the control comparisons and its plots (written to `img`, embedded)."""
    esc = html.escape
    d = rep.decision
    check = d.checks[r]
    parts = [f"<h2>{esc(r)} <small>({esc(_col_note(check))})</small></h2>",
             f"<p>{esc(check.text(d.alpha_star))}. {esc(check.lobo)}.</p>",
             f"<h3>Contrasts (intervals at {100 * (1 - d.alpha_star):.3g}%; eq_low/eq_high at "
             f"{100 * (1 - 2 * d.alpha_star):.3g}% for the equivalence test; p unadjusted, p_adj = p x "
             f"{d.family})</h3>" + _table_html(verdict_rows(d, r))]
    anova = res.anova.drop(columns=["p_adj"], errors="ignore")
    parts.append(f"<h3>ANOVA (Type {res.typ}; F tests, p unadjusted; the verdicts above decide)</h3>"
                 + _table_html(anova))
    parts += [f"<p><em>{esc(note)}</em></p>" for note in res.warnings]
    parts.append("<h3>Cell means</h3>" + _table_html(cell_means(data, r, factors)))
    figs = [plots.main_effects(data, r, factors, img / f"{slug}_main.png")]
    if len(factors) > 1:
        figs.append(plots.interactions(data, r, factors, img / f"{slug}_interactions.png"))
    if res.effects is not None:
        rows = verdict_rows(d, r)
        e = pd.DataFrame({"effect": rows["estimate"], "se": rows["se"], "df_resid": rows["df"]})
        e = e.loc[[t for t in res.effects.index if t in e.index]]
        e.attrs["response"] = r
        figs.append(plots.pareto(e, img / f"{slug}_pareto.png", d.alpha_star))
        figs.append(plots.half_normal(res.effects, img / f"{slug}_halfnormal.png"))
    if r in rep.control:
        c = rep.control[r]
        parts.append(f"<h3>Every factorial arm against the control (pooled, replicate as block)</h3>"
                     f"<p>{c['diff']:+.4g} ({100 * c['rel']:+.1f}% of the control mean {c['control_mean']:.4g}), "
                     f"{100 * (1 - d.alpha_star):.3g}% CI [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}] (pooled errors), "
                     f"p={c['p']:.2g}; {c['n_factorial']} factorial runs, {c['n_control']} control runs.</p>")
    if r in rep.dunnett:
        parts.append("<h3>Each arm against the control (Dunnett's p, adjusted over the arms; diff_pct "
                     "relative to the control mean)</h3>" + _table_html(rep.dunnett[r]))
    resid = residuals(data, res)
    if len(resid) > 2:
        fitted = pd.to_numeric(data.loc[resid.index, r]).to_numpy(float) - resid.to_numpy(float)
        figs.append(plots.residual_checks(fitted, resid.to_numpy(float), r, img / f"{slug}_residuals.png"))
    out = parts + [_img(p) for p in figs]
    if "run_order" in data.columns and len(resid):
        drift = rep.drift.get(r)
        path = plots.residuals_vs_order(centred_order(data, res, resid), resid.to_numpy(float), r,
                                        img / f"{slug}_drift.png", drift)
        caption = (f"drift within blocks: slope {drift[0]:+.3g}/run, p={drift[1]:.2g} (the summary's figures)"
                   if drift else "drift not checked (too few runs)")
        out.append(f"<figure class='drift'>{_img(path)}<figcaption>{esc(caption)}</figcaption></figure>")
    return out


def _md_table(df: pd.DataFrame) -> str:
    df = df.reset_index()
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) if isinstance(v, (float, np.floating)) else str(v) for v in row) + " |")
    return "\n".join(lines)


def write_markdown(df: pd.DataFrame, rep: Report, factors: list[str], path: Path) -> Path:
    data = factorial_rows(df, factors)
    d = rep.decision
    header = header_text(df, rep.stage, factors)
    body = rep.summary[len(header):].lstrip("\n") if rep.summary.startswith(header) else rep.summary
    grid = verdict_grid(d)
    grid.columns = [f"{c} ({_col_note(d.checks[c])})" for c in grid.columns]
    parts = [f"# Attribution: {df.attrs.get('experiment', '')}", "", header, "", "## Verdicts", "",
             _md_table(grid.rename_axis("term")), "", d.method() + ".", "", "## Summary", "", "```", body, "```"]
    for r, res in rep.results.items():
        parts += ["", f"## {r} ({_col_note(d.checks[r])})", "", d.checks[r].text(d.alpha_star) + ".", "",
                  d.checks[r].lobo + ".", ""]
        parts += [f"Contrasts (intervals at {100 * (1 - d.alpha_star):.3g}%, equivalence at "
                  f"{100 * (1 - 2 * d.alpha_star):.3g}%):", "", _md_table(verdict_rows(d, r)), ""]
        parts += [f"ANOVA (Type {res.typ}; p unadjusted):", "", _md_table(res.anova.drop(columns=["p_adj"],
                                                                                         errors="ignore")), ""]
        parts += ["Cell means:", "", _md_table(cell_means(data, r, factors)), ""]
        if r in rep.dunnett:
            parts += ["Each arm against the control (Dunnett's p, adjusted over the arms):", "",
                      _md_table(rep.dunnett[r]), ""]
    coded = design_matrix(data, factors)
    parts += ["", "## Design", "", f"Design {df.attrs.get('design') or 'full'}, coded (-1/+1: first/second level):",
              "", _md_table(coded), "", "Alias structure:", "", "```", *alias_structure(coded), "```"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
    return path


def log_to_parent(rep: Report, df: pd.DataFrame, tracking_uri: str | None) -> int:
    """The attribution on the sweep's parent run: a tag per verdict
    (`verdict.<response>.<term>` = matters | negligible | undecided), the verdict table as
    one artifact (`attribution/verdicts.csv`) beside the report files, and three headline
    metrics (how many primary verdicts of each kind). Returns how many tags were set."""
    import time

    from mlflow.entities import Metric, RunTag
    from dspark.record import tracking_client

    from dspark.record import VERDICT_PREFIX, tag_key

    parent = df.attrs.get("parent_run_id")
    if not parent:
        raise AnalysisError("these runs have no parent run to log the attribution on")
    client = tracking_client(tracking_uri)
    d = rep.decision
    tags = [RunTag(tag_key(f"{VERDICT_PREFIX}{v.response}.{v.term}")[:250], v.verdict) for v in d.verdicts]
    ts = int(time.time() * 1000)
    counts = [Metric(f"verdicts/{k}", float(n), ts, 0) for k, n in d.counts().items()]
    for i in range(0, max(len(tags), 1), 90):
        client.log_batch(parent, metrics=counts if i == 0 else [], tags=tags[i:i + 90])
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "verdicts.csv"
        d.table().to_csv(table, index=False)
        client.log_artifact(parent, str(table), artifact_path="attribution")
    for path in (rep.html_path, rep.markdown_path):
        if path is not None:
            client.log_artifact(parent, str(path), artifact_path="attribution")
    return len(tags)
