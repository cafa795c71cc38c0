"""The report's files: one self-contained HTML file (plots embedded) and the Markdown file,
from a built report, its words (`analysis.rendering.words`) and tables (`analysis.rendering.tables`)."""

from __future__ import annotations

import base64
import html
import re
import tempfile
from pathlib import Path

import pandas as pd

from trials.store.kept import write_atomic
from trials.store.ui import UI_URL, run_url
from . import plots
from ..report_types import Report, ResponseResult
from ..decision import Decision
from ..result_types import BEYOND, NEGLIGIBLE, UNSURE
from ..coded_design import alias_structure, design_matrix, factorial_rows
from ..diagnostics import cell_means, centred_order, model_fit_table, residuals
from trials.export import SweepFrame
from .answer_grid import VERDICT_COLOURS, verdict_colour, verdict_grid, verdict_rows
from .words import header_text, next_command, notes
from .tables import (EFFECTS_LEGEND, col_note, effects_table, errors_table, margin_table, md_table, pct_text,
                            run_table, simple_table, table_html)


# ---------------------------------------------------------------- HTML and Markdown


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(path).stem)}">'


def _run_table_html(sweep: SweepFrame, ui: str) -> str:
    """The runs in launch order, each name linked to its run in the MLflow UI at `ui`."""
    t = run_table(sweep.runs)
    exp_id = sweep.record.experiment_id
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


def _verdict_table_html(decision: Decision) -> str:
    esc = html.escape
    grid = verdict_grid(decision)
    kinds = {(v.term, v.response): verdict_colour(v) for v in decision.verdicts}
    caveats = {(v.term, v.response): v.caveat() for v in decision.verdicts if v.caveat()}
    head = "".join(f"<th>{esc(c)}<br><small>{esc(col_note(decision.checks[c]))}</small></th>" for c in grid.columns)
    rows = []
    for term, row in grid.iterrows():
        cells = []
        for response, text in row.items():
            kind = kinds.get((term, response))
            style = (f" class='v-{kind.replace(', ', '-').replace(' ', '-')}' style='background:{VERDICT_COLOURS[kind]}'"
                     if kind else "")
            why = caveats.get((term, response), "")
            cells.append(f"<td{style}>{esc(text)}{f'<br><small>{esc(why)}</small>' if why else ''}</td>")
        rows.append(f"<tr><th>{esc(str(term))}</th>{''.join(cells)}</tr>")
    key = " ".join(f"<span style='background:{c};padding:0 6px'>{esc(k)}</span>" for k, c in (
        (f"{BEYOND}: better at the term's +1", VERDICT_COLOURS["better"]),
        (f"{UNSURE}: better at +1", VERDICT_COLOURS["better, size unsure"]),
        (f"{BEYOND}: worse at +1", VERDICT_COLOURS["worse"]),
        (f"{UNSURE}: worse at +1", VERDICT_COLOURS["worse, size unsure"]),
        (NEGLIGIBLE, VERDICT_COLOURS["negligible"]), ("undecided", VERDICT_COLOURS["undecided"])))
    key += (" <small>(+1: a factor's second level; for an interaction, the product of its factors' "
            "codes)</small>")
    notes = "".join(f"<p class='caveat'><b>{esc(r)}</b>: {esc(n)}</p>" for r in grid.columns
                    for n in decision.caveats.get(r, []))
    return (f"<table class='t verdicts'><tr><th>term</th>{head}</tr>{''.join(rows)}</table>{notes}"
            f"<p class='key'><small>{key}</small></p>")


def _look_html(rep: Report) -> str:
    """Which look this report is (or that it is post hoc, or a what-if), on the first screen."""
    label = rep.look.label() if rep.look is not None else ""
    if not label:
        return ""
    loud = " style='background:#fdecea;padding:4px 8px;font-weight:bold'"
    style = loud if label.startswith(("POST HOC", "what-if")) else ""
    return f"<p class='look'{style}>{html.escape(label)}</p>" + "".join(
        f"<p class='look'{loud}>{html.escape(x)}</p>" for x in rep.look.distrusted)


CELLS_NOTE = ("Cells: the verdict, the estimate (high minus low) and the interval the decision used: (1 - 2 x its "
              "one-sided level) (its bounds are the one-sided tests) for 'beyond the margin' and 'negligible', (1 - its "
              "two-sided level) otherwise; each response's levels are in its section.")


def write_html(sweep: SweepFrame, rep: Report, factors: list[str], out: Path, ui: str = UI_URL) -> Path:
    """One self-contained file: every plot is embedded (written atomically). The question
    and the verdict table come first."""
    out.mkdir(parents=True, exist_ok=True)
    df, record = sweep.runs, sweep.record
    data = factorial_rows(df, factors)
    esc, d = html.escape, rep.decision
    header = header_text(sweep, rep.stage, factors, links=rep.links)
    body = rep.summary[len(header):].lstrip("\n") if rep.summary.startswith(header) else rep.summary
    parts = [f"<h1>Attribution: {esc(record.experiment)}</h1>",
             "".join(f"<p>{esc(line)}</p>" for line in header.splitlines()[:1]),
             _look_html(rep),
             _verdict_table_html(d),
             f"<p><small>{esc(d.method())}. {CELLS_NOTE}</small></p>",
             f"<p><b>Next:</b> <code>{esc(next_command(d, record.experiment, rep.look)[1])}</code></p>",
             "".join(f"<p>{esc(line)}</p>" for line in header.splitlines()[1:]
                     if not (rep.look and (line == rep.look.label() or line in rep.look.distrusted))),
             _model_fit_html(rep)]
    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp)
        for i, (r, res) in enumerate(rep.results.items()):
            parts += _response_html(data, r, res, rep, factors, img, f"r{i}")
        for i, (title, columns) in enumerate(sweep.registry.curves(df.columns).items()):
            # the first keeps the file name reports have always given it
            p = plots.curves(df, img / f"acceptance_curves{f'_{i + 1}' if i else ''}.png", columns, title)
            parts.append(f"<h2>{esc(title[:1].upper() + title[1:])}</h2>{_img(p)}")
    coded = design_matrix(data, factors)
    parts.append(f"<h2>Design</h2><p>Design {esc(record.design or 'full')}; alias structure (aliased terms are "
                 "left out of the ANOVA, noted per response):</p><pre>"
                 + esc("\n".join(alias_structure(coded))) + "</pre>"
                 + _folded(f"the coded design ({len(coded)} rows)", table_html(coded)))
    parts.append("<h2>Runs in launch order</h2><p>Names link to the runs in the MLflow UI at "
                 f"{esc(ui)} (<code>analysis report --ui-url</code>).</p>"
                 + _folded(f"the {len(sweep.runs)} runs", _run_table_html(sweep, ui)))
    parts.append("<h2>The terminal summary</h2>"
                 + _folded("as analysis report --verbose printed it", f"<pre>{esc(body)}</pre>"))
    parts = _with_contents(parts, at=6)
    style = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table.t{border-collapse:collapse}"
             "table.t td,table.t th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}"
             "table.t td{white-space:nowrap}table.verdicts td{text-align:left}table.t th{text-align:left}"
             "details{margin:6px 0 12px}summary{cursor:pointer;color:#1a5490}"
             "img{max-width:100%;display:block;margin:8px 0}pre{white-space:pre-wrap}</style>")
    path = out / "report.html"
    write_atomic(path, f"<!doctype html><html><head><meta charset='utf-8'><title>attribution</title>{style}"
                       f"</head><body>{''.join(parts)}</body></html>")
    return path


def _model_fit_html(rep: Report) -> str:
    pareto = any(res.effects is not None for res in rep.results.values())
    return ("<h2>Model fit</h2><p>Per response: runs, residual degrees of freedom, S (the residual standard "
            "deviation, in the response's unit), R² and adjusted R². Each response's section below has its "
            "residual plots (normal probability; against fitted; against run order)"
            + (" and, where its effects are estimated, its Pareto chart with the line at the level its verdicts "
               "were tested at" if pareto else "") + ".</p>" + table_html(model_fit_table(rep.results)))


def _with_contents(parts: list[str], at: int) -> list[str]:
    """The sections from `parts[at]` on, each heading numbered as an anchor, and a line of
    links to them placed at `at` (after the title, the question, the look and the verdict
    table, which stay first)."""
    import re

    links: list[str] = []

    def anchor(m) -> str:
        links.append(f"<a href='#s{len(links) + 1}'>{re.sub(r'<small>.*?</small>', '', m.group(1))}</a>")
        return f"<h2 id='s{len(links)}'>{m.group(1)}</h2>"

    rest = re.sub(r"<h2>(.*?)</h2>", anchor, "".join(parts[at:]))
    return [*parts[:at], "<p class='contents'><b>Contents</b>: " + " · ".join(links) + "</p>", rest]


def _response_html(data: pd.DataFrame, r: str, res: ResponseResult, rep: Report, factors: list[str],
                   img: Path, slug: str) -> list[str]:
    """One response's section: what its verdicts rest on, its terms (one interval convention
    per table, the level in its header, a legend), and folded below them the simple effects,
    ANOVA, cell means, control comparisons and plots (written to `img`, embedded)."""
    esc = html.escape
    d = rep.decision
    check = d.checks[r]
    effects = (f"<h3>Effects, {pct_text(1 - d.alpha_of(r))} intervals (the test of 'no effect' at level "
               f"{d.alpha_of(r):.3g})</h3>" + table_html(effects_table(d, r))
               + f"<p class='legend'><small>{esc(EFFECTS_LEGEND)}</small></p>")
    parts = [f"<h2>{esc(r)} <small>({esc(col_note(check))})</small></h2>",
             f"<p>{esc(check.text())}.</p>"]
    if check.margin is not None:  # a secondary response's table is folded: the answer stays on the first screens
        parts.append(effects)
    else:
        parts.append(_folded("its effects (a secondary response: no margin, no verdict beyond 'matters')", effects))
    if check.margin is not None:
        parts.append(f"<h3>Within &plusmn;{check.margin:g}? {pct_text(1 - 2 * d.alpha_eq_of(r))} intervals (their "
                     f"bounds are the two one-sided tests at {d.alpha_eq_of(r):.3g}: inside the margin is "
                     "'negligible')</h3>"
                     + table_html(margin_table(d, r)))
    more = [*_simple_and_noise_html(rep, r),
            "<h3>What each test rests on</h3>" + table_html(errors_table(d, r))]
    anova = res.anova.drop(columns=["p_adj"], errors="ignore")
    more.append(f"<h3>ANOVA (Type {res.typ}; F tests, p unadjusted; the verdicts above decide)</h3>"
                + table_html(anova))
    more += [f"<p><em>{esc(note)}</em></p>" for note in res.warnings]
    more.append("<h3>Cell means</h3>" + table_html(cell_means(data, r, factors)))
    if r in rep.control:
        c = rep.control[r]
        more.append(f"<h3>Every factorial arm against the control (pooled, replicate as block)</h3>"
                    f"<p>{c['diff']:+.4g} ({100 * c['rel']:+.1f}% of the control mean {c['control_mean']:.4g}), "
                    f"{100 * (1 - d.alpha_of(r)):.3g}% CI [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}] "
                    f"({c['errors']} errors), "
                    f"p={c['p']:.2g}; {c['n_factorial']} factorial runs, {c['n_control']} control runs.</p>")
    if r in rep.dunnett:
        more.append("<h3>Each arm against the control (Dunnett's p, adjusted over the arms; diff_pct "
                    "relative to the control mean)</h3>" + table_html(rep.dunnett[r]))
    more += _response_figures(data, r, res, rep, factors, img, slug)
    return parts + [_folded("simple effects, ANOVA, cell means, plots (main effects, interactions, Pareto, "
                            "half-normal, residuals, drift)", "".join(more))]


def _response_figures(data: pd.DataFrame, r: str, res: ResponseResult, rep: Report, factors: list[str],
                      img: Path, slug: str) -> list[str]:
    """A response's plots, embedded: main effects, interactions, Pareto, half-normal, residual
    checks, and the residuals against run order with the drift check's own line."""
    d = rep.decision
    figs = [plots.main_effects(data, r, factors, img / f"{slug}_main.png")]
    if len(factors) > 1:
        figs.append(plots.interactions(data, r, factors, img / f"{slug}_interactions.png"))
    if res.effects is not None:
        rows = verdict_rows(d, r)
        e = pd.DataFrame({"effect": rows["estimate"], "se": rows["se"], "df_resid": rows["df"]})
        e = e.loc[[t for t in res.effects.index if t in e.index]]
        figs.append(plots.pareto(e, img / f"{slug}_pareto.png", d.alpha_of(r), response=r))
        figs.append(plots.half_normal(res.effects, img / f"{slug}_halfnormal.png", response=r))
    resid = residuals(res)
    if len(resid) > 2:
        figs.append(plots.residual_checks(res.fit.fitted.to_numpy(float), resid.to_numpy(float), r,
                                          img / f"{slug}_residuals.png"))
    out = [_img(p) for p in figs]
    if "run_order" in data.columns and len(resid):
        drift = rep.drift.get(r)
        path = plots.residuals_vs_order(centred_order(data, res, resid), resid.to_numpy(float), r,
                                        img / f"{slug}_drift.png", drift)
        caption = (f"drift within blocks: slope {drift[0]:+.3g}/run, p={drift[1]:.2g} (the summary's figures)"
                   if drift else "drift not checked (too few runs)")
        out.append(f"<figure class='drift'>{_img(path)}<figcaption>{html.escape(caption)}</figcaption></figure>")
    return out


def _folded(what: str, body: str) -> str:
    """Details a reader opens when wanted: folded, so the page stays the answer and its tables."""
    return f"<details><summary>{html.escape(what)}</summary>{body}</details>"


def _simple_and_noise_html(rep: Report, r: str) -> list[str]:
    """A response's simple effects table and its noise split, where it has them."""
    parts = []
    simple = simple_table(rep.decision, r)
    if len(simple):
        parts.append("<h3>Simple effects: each primary main effect at every combination of the other factors' "
                     "levels (decided at alpha*, outside the family; interval as in the verdict table)</h3>"
                     + table_html(simple))
    if r in rep.noise:
        parts.append(f"<p>Noise: {html.escape(rep.noise[r].text())}.</p>")
    return parts


def _fenced(text: str) -> list[str]:
    """A code block that no run of backticks in `text` can close early."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return [fence, text, fence]


def write_markdown(sweep: SweepFrame, rep: Report, factors: list[str], path: Path) -> Path:
    data = factorial_rows(sweep.runs, factors)
    d, record = rep.decision, sweep.record
    header = header_text(sweep, rep.stage, factors, links=rep.links)
    body = rep.summary[len(header):].lstrip("\n") if rep.summary.startswith(header) else rep.summary
    grid = verdict_grid(d)
    grid.columns = [f"{c} ({col_note(d.checks[c])})" for c in grid.columns]
    parts = [f"# Attribution: {record.experiment}", "", header, "", "## Verdicts", "",
             md_table(grid.rename_axis("term")), "", d.method() + ".", "", "## Model fit", "",
             md_table(model_fit_table(rep.results)), "", "## Summary", "", *_fenced(body)]
    for r, res in rep.results.items():
        parts += ["", f"## {r} ({col_note(d.checks[r])})", "", d.checks[r].text() + ".", ""]
        if r in rep.noise:
            parts += [f"Noise: {rep.noise[r].text()}.", ""]
        parts += [f"Contrasts (intervals at {100 * (1 - d.alpha_of(r)):.3g}%, equivalence at "
                  f"{100 * (1 - 2 * d.alpha_eq_of(r)):.3g}%; a term decided at an earlier look keeps that look's):",
                  "", md_table(verdict_rows(d, r)), ""]
        simple = simple_table(d, r)
        if len(simple):
            parts += ["Simple effects (each primary main effect at every combination of the other factors' levels, "
                      "at alpha*, outside the family):", "", md_table(simple), ""]
        parts += [f"ANOVA (Type {res.typ}; p unadjusted):", "", md_table(res.anova.drop(columns=["p_adj"],
                                                                                         errors="ignore")), ""]
        parts += ["Cell means:", "", md_table(cell_means(data, r, factors)), ""]
        if r in rep.dunnett:
            parts += ["Each arm against the control (Dunnett's p, adjusted over the arms):", "",
                      md_table(rep.dunnett[r]), ""]
    coded = design_matrix(data, factors)
    parts += ["", "## Design", "", f"Design {record.design or 'full'}, coded (-1/+1: first/second level):",
              "", md_table(coded), "", "Alias structure:", "", *_fenced("\n".join(alias_structure(coded)))]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(parts) + "\n")
    return path
