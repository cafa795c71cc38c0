"""The report's rendering: the terminal summary, the Markdown file and the one self-contained
HTML file (plots embedded), from the results `analysis.report.build_report` assembles. It
leads with the answer: the question, then the verdict table (terms against the primary
responses, each cell the verdict, the estimate and the interval its decision used)."""

from __future__ import annotations

import base64
import html
import math
import re
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from trials.store.kept import write_atomic
from trials.store.ui import TRAINING_VIEW, UI_URL, md_text, run_url

from . import plots
from .sequential import LookResult, boundary_lines
from .text import BRIEF_WIDTH, wrap_text
from .result_types import BEYOND, MIN_DF, NEGLIGIBLE, UNDECIDED, UNSURE, Decision, Report, ResponseResult
from .coded_design import alias_structure, design_matrix, factorial_rows, without_value
from .diagnostics import DRIFT_ALPHA, cell_means, centred_order, model_fit_table, residuals
from .frame import SweepFrame
from .item_kinds import count_column
from .sweep_reader import report_incomplete
from .variance import items_unused


def _fmt(x, digits=4):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, (float, np.floating)) else str(x)


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
    untested = sorted({v.term for v in decision.family_verdicts() if v.untested and not v.identical and v.response in cols})
    if untested:  # an interval beside "undecided" says why nothing was tested, on the same screen
        lines.append(f"  not tested at this look ({', '.join(untested)}): too few blocks for a term's own error (no look "
                     f"tests under {MIN_DF + 1} blocks); their intervals are shown, nothing was decided")
    return "\n".join(line.rstrip() for line in lines)


def summarise(decision: Decision, results: dict[str, ResponseResult],
              drift: dict[str, tuple[float, float]] | None = None, noise: dict | None = None, look=None) -> str:
    """Per response: what its verdicts rest on, then one line per term that starts with
    `<term>: <verdict>`; the primary main effects at every level of the others; every effect
    detected outside the family; the family's counts; the plan's boundary table (`look`)."""
    drift = drift or {}
    lines = [decision.method()]
    any_margin = any(c.margin is not None for c in decision.checks.values())
    for r, check in decision.checks.items():
        res = results.get(r)
        head = check.text()
        if res is not None and not res.balanced:
            head = head[:-1] + "; unbalanced)"
        prefix = "primary: " if check.margin is not None else "secondary: " if any_margin else ""
        lines.append(prefix + head)
        lines += [f"    {v.text()}" for v in decision.of(r)]
        lines += [f"    {line}" for line in simple_lines(decision, r)]
        if (noise or {}).get(r) is not None:
            lines.append(f"    noise: {noise[r].text()}")
        if r in drift:
            slope, p = drift[r]
            flag = "  <- drift" if p < DRIFT_ALPHA else "  (p < 0.05, below the flag's 0.01)" if p < 0.05 else ""
            lines.append(f"    drift check: residual slope {slope:+.3g} per run within blocks, p={p:.2g}{flag}")
        for note in (res.warnings if res is not None else []):
            lines.append(f"    note: {note}")
    detected = [v for v in decision.verdicts if not v.in_family and v.matters]
    if detected:
        lines.append(f"detected outside the family ({len(detected)}, at the same alpha*):")
        lines += [f"    {v.response} {v.term}: {v.verdict} {v.estimate:+.4g} [{v.interval()[0]:+.4g}, "
                  f"{v.interval()[1]:+.4g}]" for v in detected]
    kind = "the family's verdicts" if any_margin else "verdicts"
    lines.append(f"{kind}: {decision.counts_text()}")
    lines += boundary_lines(decision, look)
    return "\n".join(lines)


def simple_lines(decision: Decision, response: str) -> list[str]:
    """Per primary main effect of a response, how it fares at each level of the others (what
    a sentence "it holds at every level" must rest on)."""
    out = []
    by_term: dict[str, list] = {}
    for s in decision.simple:
        if s.response == response:
            by_term.setdefault(s.term, []).append(s)
    for term, effects in by_term.items():
        states = [s.verdict.verdict for s in effects]
        tally = ", ".join(f"{states.count(k)} {k}" for k in dict.fromkeys(states))
        lows = [s.verdict.interval()[0] for s in effects]
        highs = [s.verdict.interval()[1] for s in effects]
        out.append(f"{term} at each of the {len(effects)} combinations of the other factors' levels: {tally} "
                   f"(bounds from {min(lows):+.4g} to {max(highs):+.4g}; each in the report)")
    return out


def _mixed_counts(data: pd.DataFrame, chosen: list[str], sweep: SweepFrame) -> list[str]:
    """A line for each evaluation count (the column a response's registry row says its items
    are drawn on) whose value differs between runs: a re-evaluation not finished."""
    rules, out = sweep.registry, []
    for column in dict.fromkeys(count_column(r, rules) for r in chosen):
        seen = sorted(set(pd.to_numeric(data[column], errors="coerce").dropna())) if column in data.columns else []
        if len(seen) > 1:
            drawn = ", ".join(r for r in chosen if count_column(r, rules) == column)
            out.append(f"note: the runs' latest evaluations counted different numbers of items on {column} "
                       f"({', '.join(f'{n:g}' for n in seen)}): finish `trials reeval` before reading {drawn}")
    return out


def notes(sweep: SweepFrame, data: pd.DataFrame, chosen: list[str], fraction: str, dunnett: bool,
          skipped: list[str]) -> str:
    """The summary's closing lines: the design's aliases, runs a response lacks, mixed
    evaluations, the sequential look, incomplete runs and what was skipped."""
    lines = [fraction] if fraction else []
    for r in chosen:
        missing = without_value(data, r)
        if missing:
            lines.append(f"warning: {r} is analysed on {len(data) - len(missing)} of {len(data)} runs; "
                         f"without a value: {', '.join(missing)}")
    lines += [why for r in chosen if r in sweep.record.responses and (why := items_unused(data, r))]
    lines += _mixed_counts(data, chosen, sweep)
    if dunnett:
        lines.append("each arm against the control (Dunnett): see the report")
    incomplete = report_incomplete(sweep)
    if incomplete:
        lines.append(incomplete)
    if skipped:
        lines.append("skipped: " + "; ".join(skipped))
    return "".join("\n" + line for line in lines)


def _shown_terms(decision: Decision, response: str) -> list:
    """A response's verdicts the answer shows: its family's, or, for a response outside the
    family, its main effects and control contrasts."""
    mine = decision.of(response)
    return [v for v in mine if v.in_family] or [v for v in mine if ":" not in v.term]


def _num(x: float) -> str:
    return f"{x:+.0f}" if abs(x) >= 1000 else f"{x:+.3g}"


def _est(v) -> str:
    lo, hi, _ = v.interval()
    return f"{_num(v.estimate)} [{_num(lo)}, {_num(hi)}]"


def _names(terms: list[str], every: list[str]) -> str:
    """Terms named in a sentence: a factor whose pairwise contrasts (D1[a->b]) all share the
    state is named once, as "D1 (every pair of levels)"."""
    out = []
    for t in terms:
        base = t.split("[", 1)[0]
        pairs = [u for u in every if u.startswith(base + "[")]
        if not pairs or not set(pairs) <= set(terms):
            out.append("the arms " + t if t.startswith("vs ") else t)
        elif f"{base} (every pair of levels)" not in out:
            out.append(f"{base} (every pair of levels)")
    return out[0] if len(out) == 1 else ", ".join(out[:-1]) + " and " + out[-1]


def sentence(decision: Decision, response: str) -> str:
    """A response's answer in one plain sentence, each claim the verdict of the interval the
    table prints above it."""
    shown = _shown_terms(decision, response)
    margin = decision.checks[response].margin
    m = f"+-{margin:g}" if margin is not None else ""
    parts = []
    for v in shown:
        if not v.matters:
            continue
        way = {"better": "improves it", "worse": "worsens it"}.get(v.direction(), "changes it")
        what = f"{v.term} ({v.label})" if v.label else v.term
        size = "beyond the margin" if v.verdict == BEYOND else (
            f"(whether beyond {m} is unsure)" if margin is not None else "(no margin declared to size it)")
        parts.append(f"{what} {way} {size}")
    for state, word in ((NEGLIGIBLE, f"negligible (within {m})"), (UNDECIDED, "undecided")):
        terms = [v.term for v in shown if v.verdict == state]
        if terms:
            named = _names(terms, [v.term for v in shown])
            plural = " and " in named or "every pair" in named or named.startswith("the arms")
            parts.append(f"{named} {'are' if plural else 'is'} {word}")
    return f"{response}: " + "; ".join(parts) + "." if parts else f"{response}: no term to judge."


def next_step(decision: Decision, experiment: str, look: LookResult | None = None) -> str:
    """The planner's cheapest next step when a family verdict is undecided: the fewest replicate
    blocks, within the sweep's plan, that would decide one of them (80%, if its effect is as
    estimated). Where the sweep declared no plan, it says first that the next look would be
    post hoc; where the plan's blocks are spent, that a new, declared study is the way on."""
    open_ = [v for v in decision.family_verdicts() if v.verdict == UNDECIDED]
    if not open_:
        return ""
    plan = look.plan if look is not None and not look.what_if else None
    tail = f"every option, items too, priced: analysis plan {experiment}"
    if plan is not None and plan.planned and look.look is not None and look.look.blocks >= plan.max_replicates:
        return (f"next step: the plan's {plan.max_replicates} blocks are all run, so the {len(open_)} undecided "
                f"term(s) need a new, declared study; its size and other options: analysis plan {experiment}")
    priced = sorted((v for v in open_ if v.blocks), key=lambda v: v.blocks)
    if not priced:
        return f"next step: no number of blocks within reach decides the {len(open_)} undecided term(s); {tail}"
    v = priced[0]
    post_hoc = ("; this sweep declared no sequential plan, so that look would be POST HOC (declare `sequential:` "
                "in the spec before a sweep's first look)" if plan is not None and not plan.planned else "")
    return (f"next step: {v.blocks} more replicate block(s) would decide {v.response} {v.term} (80%, if its effect "
            f"is as estimated): trials augment {experiment} --replicates {v.blocks}{post_hoc}; {tail}")


def next_command(decision: Decision, experiment: str, look: LookResult | None = None) -> tuple[float, str]:
    """The cheapest next command and its price in blocks (inf where none is priced): the
    augment `next_step` names, the planner where no block count within reach decides a term or
    the plan is spent, and the report itself where every family term is decided."""
    step = next_step(decision, experiment, look)
    if not step:
        return math.inf, f"analysis report {experiment} --verbose  (every family term is decided: each one's detail)"
    if "trials augment " in step:
        command = step[step.index("trials augment "):].split(";")[0]
        return float(command.rsplit(" ", 1)[-1]), command
    return math.inf, f"analysis plan {experiment}"


def brief_text(rep: Report, sweep: SweepFrame, header: str, closing: str) -> str:
    """The answer in one screen, lines of at most BRIEF_WIDTH characters: the question and the
    look (`header`), each primary response's verdicts of its primary terms with the interval
    each decision used, a sentence per primary response, the cheapest next step, and the
    notes (`closing`). The per-term detail is `rep.summary` (`analysis report --verbose`,
    the report files)."""
    d = rep.decision
    lines = []
    for i, line in enumerate(header.splitlines()):
        lines += wrap_text(textwrap.shorten(line, 3 * BRIEF_WIDTH, placeholder=" [...]") if i == 0 else line, "  ", "")
    lines += answer_lines(d)
    step = next_step(d, sweep.record.experiment, rep.look)
    if step:
        lines += wrap_text(step, "  ", "")
    kind = "the family's verdicts" if any(c.margin is not None for c in d.checks.values()) else "verdicts"
    lines.append(f"{kind}: {d.counts_text()}")
    for note in closing.splitlines():
        if note.strip():
            lines += wrap_text(note, "  ")
    return "\n".join(lines)


NOTE_LIMIT = 5000  # characters of a run note MLflow's UI shows comfortably (its tags hold 8000)


def parent_note(rep: Report, sweep: SweepFrame) -> str:
    """The parent run's description in the MLflow UI (its `mlflow.note.content`, shown on
    the run's page): the answer first, a sentence per primary response (what MLflow's folded
    description shows before "Show more"), then the verdict table as Markdown, the caveats,
    the counts, the look, and a link to the report among the run's artifacts (relative, in
    the model-training view: it opens in whichever UI shows it)."""
    d, record, md = rep.decision, sweep.record, md_text  # every text from the sweep shown literally
    ids = f"{record.experiment_id}{record.parent_run_id}"
    report = (f"[The full report](#/experiments/{record.experiment_id}/runs/{record.parent_run_id}/artifactPath/"
              f"attribution/report.html?{TRAINING_VIEW}) (attribution/report.html)." if ids.isalnum() else "")
    look = rep.look.label() if rep.look is not None else ""
    lines = ["**The answer**, a sentence per primary response:", "",
             *[f"- {md(sentence(d, r))}" for r in answer_columns(d)]]
    if record.confirms:  # the confirmation names its screening study and the estimate it started from
        lines += ["", f"**Confirms**: {md(confirms_line(record))}; {md(FAMILY_OF_ONE)}."]
    if rep.links:  # the screening names its confirmations and their verdicts
        lines += ["", "**Confirmations of this study**:", *[f"- {md(x)}" for x in rep.links]]
    lines += ["", "| response (margin) | term | verdict | estimate [interval the decision used] |", "|---|---|---|---|"]
    for r in answer_columns(d):
        c = d.checks[r]
        head = f"{r} ({'+-' + format(c.margin, 'g') if c.margin is not None else 'no margin'})"
        for i, v in enumerate(_shown_terms(d, r)):
            why = f" ({v.caveat()})" if v.caveat() else ""
            lines.append(f"| {md(head) if i == 0 else ''} | {md(v.term)} | {md(v.verdict + why)} | {md(_est(v))} |")
    lines += ["", *[f"- {md(r)}: {md(n)}" for r in answer_columns(d) for n in d.caveats.get(r, [])], "",
              f"The family's verdicts: {d.counts_text()}. {report}",
              f"Attribution{f' at {md(look)}' if look else ''}.", "",
              *([f"**{md(x)}**" for x in rep.look.distrusted] + [""] if rep.look and rep.look.distrusted else []),
              f"**Next:** `{next_command(d, record.experiment, rep.look)[1]}`"]
    text = "\n".join(lines)
    if len(text) <= NOTE_LIMIT:
        return text
    return text[:NOTE_LIMIT - 200] + "\n\n[cut: the rest in the report]\n\n" + lines[-1]  # the next command kept


def answer_lines(d: Decision) -> list[str]:
    """The answer's core (the brief's, and `analysis recap`'s): each primary response's
    verdicts of its primary terms with the interval each used, then a sentence per response."""
    lines = []
    cols = answer_columns(d)
    shown = {r: _shown_terms(d, r) for r in cols}
    term_w = max([len(v.term) for vs in shown.values() for v in vs] + [4])
    verdict_w = max([len(v.verdict) for vs in shown.values() for v in vs] + [7])
    lines.append("verdicts (estimate [interval the decision used]):")
    few = f"too few blocks to judge any term: its own error needs {MIN_DF + 1} blocks"
    untested = {r for r in cols if shown[r] and all(v.untested for v in shown[r])}
    for r in cols:
        c = d.checks[r]
        lines.append(f"  {r} ({c.better + ' is better; ' if c.better else ''}"
                     f"{'margin ' + c.margin_text if c.margin is not None else 'no margin declared'})")
        every = r in untested
        for v in shown[r]:
            lines.append(f"    {v.term.ljust(term_w)}  {v.verdict.ljust(verdict_w)}  {_est(v)}")
            if v.differs() and not every:  # a look that tests nothing: the tests' detail is in --verbose
                lines += wrap_text(f"^ {v.term}: {v.differs()}", "        ", "      ")
        wide = [v for v in shown[r] if v.few and v.margin]
        if wide and not every:  # one line for the terms whose intervals say little
            spans = [(v.interval()[1] - v.interval()[0]) / v.margin for v in wide]
            lines += wrap_text(f"^ {', '.join(v.term for v in wide)}: intervals {min(spans):.0f}-{max(spans):.0f} "
                               f"margins wide on {min(v.df for v in wide):.2g}-{max(v.df for v in wide):.2g} df of "
                               "their own errors; what would decide each: --verbose", "        ", "      ")
        if every and len(untested) < len(cols):  # one line, not one a term: too few blocks for their own errors
            lines.append(f"      ^ {few}")
        for note in d.caveats.get(r, []):
            lines += wrap_text(f"note: {note}", "      ", "    ")
    if cols and len(untested) == len(cols):  # once for every response
        lines.append(f"  ^ {few}, for every response")
    rest = [v for v in d.verdicts if v.response in cols and all(v is not w for w in shown[v.response])]
    if rest:
        states = [v.verdict for v in rest]
        said = {BEYOND: "matter beyond the margin", UNSURE: "matter (size unsure)"}
        tally = ", ".join(f"{states.count(k)} {said.get(k, k)}" for k in dict.fromkeys(states))
        lines += wrap_text(f"other terms (interactions, outside the family): {tally}; each with --verbose", "    ", "  ")
    lines.append("in a sentence:")
    for r in cols:
        lines += wrap_text(sentence(d, r), "    ", "  ")
    return lines


DESCRIPTION_SHOWN = 2000  # characters of a sweep's description a report's header shows


def shown_description(text: str) -> str:
    """A sweep's description as a report's header shows it: cut after DESCRIPTION_SHOWN
    characters, saying so (a crafted export's megabyte description would bury the verdicts)."""
    if len(text) <= DESCRIPTION_SHOWN:
        return text
    return f"{text[:DESCRIPTION_SHOWN]} [... cut: {len(text) - DESCRIPTION_SHOWN} more characters not shown]"


def confirms_line(record) -> str:
    """The confirmation's own line naming what it confirms ("" for any other sweep)."""
    c = record.confirms
    if not c:
        return ""
    return (f"confirms {c['term']} on {c['response']} of the screening study {c['study']}, which estimated it "
            f"{c['estimate']:+.4g} [{c['low']:+.4g}, {c['high']:+.4g}] ({c['verdict']} there)")


FAMILY_OF_ONE = ("its claim's family: this one question, at its plan's alpha (the screening's report gives the "
                 "familywise error across its confirmations, with a Holm view)")


def header_text(sweep: SweepFrame, stage: str | None, factors: list[str], look: str = "",
                links: list[str] | None = None) -> str:
    df, record = sweep.runs, sweep.record
    data = factorial_rows(df, factors)
    # the question is the sweep's own, as its spec describes it; the variant (DSpark: the
    # parallel stage) decides what its metrics can rank
    field = sweep.registry.variant_field
    what = field.replace('_', ' ')
    where = f"{what}: {stage}" if stage and field else f"{what} mixed or unknown" if field else ""
    said = shown_description(record.description) if record.description else "its spec gives no description"
    lines = [f"experiment {record.experiment}: {said}" + (f" ({where})" if where else "")]
    if record.confirms:  # a confirmation names the screening study and the estimate it started from
        lines += [confirms_line(record), FAMILY_OF_ONE]
    reps = data["replicate"].nunique() if len(data) else 0
    n_control = len(df) - len(data)
    lines.append(f"{len(data)} finished factorial runs" + (f" and {n_control} control runs" if n_control else "")
                 + f", factors {', '.join(factors)}, {reps} replicate(s) as blocks, run order randomised within "
                 "each block")
    if look:
        lines.append(look)
    lines += links or []  # a screening study's confirmations, each with its verdict
    return "\n".join(lines)


# ---------------------------------------------------------------- HTML and Markdown


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(path).stem)}">'


def _table_html(df: pd.DataFrame) -> str:
    return df.to_html(float_format=lambda v: _fmt(v), na_rep="", border=0, classes="t")


def run_table(df: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("run_order", "run_name", "cell", "replicate", "seed", "run_id") if c in df.columns]
    return df[cols].sort_values("run_order" if "run_order" in cols else cols[0]).reset_index(drop=True)


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


# a term that matters is coloured by what it does to the response, not alarmed at


VERDICT_COLOURS = {"better": "#a5d6a7", "better, size unsure": "#dcedc8", "worse": "#ef9a9a",
                   "worse, size unsure": "#f8d7d3", "negligible": "#e4e4e4", "undecided": "#f3e6b3"}


def verdict_colour(v) -> str:
    """A term that matters is coloured by what its +1 level does to the response (better or
    worse), lighter where its size is unsure; negligible and undecided have their own."""
    if not v.matters:
        return v.verdict
    if v.better not in ("higher", "lower"):
        return "undecided"
    way = "better" if (v.estimate > 0) == (v.better == "higher") else "worse"
    return way if v.verdict == BEYOND else f"{way}, size unsure"


def verdict_cell(v) -> str:
    """A verdict with its estimate and the interval its decision used."""
    lo, hi, _ = v.interval()
    return f"{v.verdict}: {v.estimate:+.3g} [{lo:+.3g}, {hi:+.3g}]"


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
    kinds = {(v.term, v.response): verdict_colour(v) for v in decision.verdicts}
    caveats = {(v.term, v.response): v.caveat() for v in decision.verdicts if v.caveat()}
    head = "".join(f"<th>{esc(c)}<br><small>{esc(_col_note(decision.checks[c]))}</small></th>" for c in grid.columns)
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


def _pct_text(level: float) -> str:
    return f"{100 * level:.3f}".rstrip("0").rstrip(".") + "%"


def _col_note(check) -> str:
    margin = f"margin {check.margin_text.replace('+-', '±')}" if check.margin is not None else "secondary, no margin"
    return f"{check.better} is better; {margin}"


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
        if any(c.startswith("spec/accept@") for c in df.columns):
            p = plots.acceptance_curves(df, img / "acceptance_curves.png")
            parts.append(f"<h2>Per-slot acceptance</h2>{_img(p)}")
    coded = design_matrix(data, factors)
    parts.append(f"<h2>Design</h2><p>Design {esc(record.design or 'full')}; alias structure (aliased terms are "
                 "left out of the ANOVA, noted per response):</p><pre>"
                 + esc("\n".join(alias_structure(coded))) + "</pre>"
                 + _folded(f"the coded design ({len(coded)} rows)", _table_html(coded)))
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
               "were tested at" if pareto else "") + ".</p>" + _table_html(model_fit_table(rep.results)))


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


def verdict_rows(decision: Decision, response: str) -> pd.DataFrame:
    """One response's contrasts as the decision saw them."""
    t = decision.table()
    t = t[t["response"] == response].set_index("term")
    return t[["verdict", "estimate", "se", "df", "ci_low", "ci_high", "eq_low", "eq_high", "p", "p_adj", "p_equiv",
              "to_boundary", "block_F", "block_p", "in_family", "errors", "decided_at"]]


def simple_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's primary main effects at each combination of the other factors' levels."""
    rows = [{"term": s.term, "at": s.at, "verdict": s.verdict.verdict, "estimate": s.verdict.estimate,
             "low": s.verdict.interval()[0], "high": s.verdict.interval()[1], "se": s.verdict.se}
            for s in decision.simple if s.response == response]
    return pd.DataFrame(rows, columns=["term", "at", "verdict", "estimate", "low", "high", "se"]).set_index("term")


def term_name(v) -> str:
    """A term as a DOE report names it: by its levels where it has them ("D1: shifted ->
    aligned"), an interaction by its factors ("D1 x D2")."""
    return f"{v.term}: {v.label}" if v.label else v.term.replace(":", " x ")


def effects_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's terms with one interval convention: the (1 - alpha*) interval, the test of
    'no effect'; plain column names (EFFECTS_LEGEND)."""
    rows = [{"term": term_name(v), "effect": v.estimate, "std. error": v.se, "df": v.df, "low": v.ci_low,
             "high": v.ci_high, "p": v.p, "p x family": v.p_adj, "verdict": v.verdict
             + ("" if v.in_family else " (outside the family)")} for v in decision.of(response)]
    return pd.DataFrame(rows, columns=["term", "effect", "std. error", "df", "low", "high", "p", "p x family",
                                       "verdict"]).set_index("term")


def margin_table(decision: Decision, response: str) -> pd.DataFrame:
    """A response's terms against its margin, with the other convention alone: the (1 - 2
    alpha*) interval, whose bounds are the two one-sided tests at alpha* (TOST)."""
    rows = [{"term": term_name(v), "low": v.eq_low, "high": v.eq_high, "p (TOST)": v.p_equiv,
             "inside the margin": "yes" if v.verdict == NEGLIGIBLE else "no" if v.matters and (
                 v.eq_low > v.margin or v.eq_high < -v.margin) else "not shown"}
            for v in decision.of(response) if v.margin is not None]
    return pd.DataFrame(rows, columns=["term", "low", "high", "p (TOST)", "inside the margin"]).set_index("term")


EFFECTS_LEGEND = ("effect: the mean at the term's +1 level minus the mean at its -1 (for an interaction, the "
                  "product of its factors' codes); std. error and df: what the test used (the variance model: "
                  "seeds, items x runs, items x term, and block x term where it is judged against it); low, high: "
                  "the interval; p: the t test of 'no effect', unadjusted; p x family: p times the family's size, "
                  "the Bonferroni-adjusted p the verdict's alpha* matches; verdict: one of the four states.")


def _errors_table(decision: Decision, response: str) -> pd.DataFrame:
    """What each term's test rests on: its errors, the block-by-term test, how far it is from
    changing state."""
    t = decision.table()
    t = t[t["response"] == response].set_index("term")[["errors", "block_F", "block_p", "to_boundary"]]
    t.index = [term_name(v) for v in decision.of(response)]
    return t.rename(columns={"errors": "errors", "block_F": "block x term F", "block_p": "its p",
                             "to_boundary": "std. errors to a state change"})


def _response_html(data: pd.DataFrame, r: str, res: ResponseResult, rep: Report, factors: list[str],
                   img: Path, slug: str) -> list[str]:
    """One response's section: what its verdicts rest on, its terms (one interval convention
    per table, the level in its header, a legend), and folded below them the simple effects,
    ANOVA, cell means, control comparisons and plots (written to `img`, embedded)."""
    esc = html.escape
    d = rep.decision
    check = d.checks[r]
    effects = (f"<h3>Effects, {_pct_text(1 - d.alpha_of(r))} intervals (the test of 'no effect' at level "
               f"{d.alpha_of(r):.3g})</h3>" + _table_html(effects_table(d, r))
               + f"<p class='legend'><small>{esc(EFFECTS_LEGEND)}</small></p>")
    parts = [f"<h2>{esc(r)} <small>({esc(_col_note(check))})</small></h2>",
             f"<p>{esc(check.text())}.</p>"]
    if check.margin is not None:  # a secondary response's table is folded: the answer stays on the first screens
        parts.append(effects)
    else:
        parts.append(_folded("its effects (a secondary response: no margin, no verdict beyond 'matters')", effects))
    if check.margin is not None:
        parts.append(f"<h3>Within &plusmn;{check.margin:g}? {_pct_text(1 - 2 * d.alpha_eq_of(r))} intervals (their "
                     f"bounds are the two one-sided tests at {d.alpha_eq_of(r):.3g}: inside the margin is "
                     "'negligible')</h3>"
                     + _table_html(margin_table(d, r)))
    more = [*_simple_and_noise_html(rep, r),
            "<h3>What each test rests on</h3>" + _table_html(_errors_table(d, r))]
    anova = res.anova.drop(columns=["p_adj"], errors="ignore")
    more.append(f"<h3>ANOVA (Type {res.typ}; F tests, p unadjusted; the verdicts above decide)</h3>"
                + _table_html(anova))
    more += [f"<p><em>{esc(note)}</em></p>" for note in res.warnings]
    more.append("<h3>Cell means</h3>" + _table_html(cell_means(data, r, factors)))
    if r in rep.control:
        c = rep.control[r]
        more.append(f"<h3>Every factorial arm against the control (pooled, replicate as block)</h3>"
                    f"<p>{c['diff']:+.4g} ({100 * c['rel']:+.1f}% of the control mean {c['control_mean']:.4g}), "
                    f"{100 * (1 - d.alpha_of(r)):.3g}% CI [{c['ci_low']:+.4g}, {c['ci_high']:+.4g}] "
                    f"({c['errors']} errors), "
                    f"p={c['p']:.2g}; {c['n_factorial']} factorial runs, {c['n_control']} control runs.</p>")
    if r in rep.dunnett:
        more.append("<h3>Each arm against the control (Dunnett's p, adjusted over the arms; diff_pct "
                    "relative to the control mean)</h3>" + _table_html(rep.dunnett[r]))
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
                     + _table_html(simple))
    if r in rep.noise:
        parts.append(f"<p>Noise: {html.escape(rep.noise[r].text())}.</p>")
    return parts


def _md_table(df: pd.DataFrame) -> str:
    """A table in Markdown, every cell's text shown literally (a `|` in a level name stays in its cell)."""
    df = df.reset_index()
    cols = [md_text(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v) if isinstance(v, (float, np.floating)) else md_text(v) for v in row)
                     + " |")
    return "\n".join(lines)


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
    grid.columns = [f"{c} ({_col_note(d.checks[c])})" for c in grid.columns]
    parts = [f"# Attribution: {record.experiment}", "", header, "", "## Verdicts", "",
             _md_table(grid.rename_axis("term")), "", d.method() + ".", "", "## Model fit", "",
             _md_table(model_fit_table(rep.results)), "", "## Summary", "", *_fenced(body)]
    for r, res in rep.results.items():
        parts += ["", f"## {r} ({_col_note(d.checks[r])})", "", d.checks[r].text() + ".", ""]
        if r in rep.noise:
            parts += [f"Noise: {rep.noise[r].text()}.", ""]
        parts += [f"Contrasts (intervals at {100 * (1 - d.alpha_of(r)):.3g}%, equivalence at "
                  f"{100 * (1 - 2 * d.alpha_eq_of(r)):.3g}%; a term decided at an earlier look keeps that look's):",
                  "", _md_table(verdict_rows(d, r)), ""]
        simple = simple_table(d, r)
        if len(simple):
            parts += ["Simple effects (each primary main effect at every combination of the other factors' levels, "
                      "at alpha*, outside the family):", "", _md_table(simple), ""]
        parts += [f"ANOVA (Type {res.typ}; p unadjusted):", "", _md_table(res.anova.drop(columns=["p_adj"],
                                                                                         errors="ignore")), ""]
        parts += ["Cell means:", "", _md_table(cell_means(data, r, factors)), ""]
        if r in rep.dunnett:
            parts += ["Each arm against the control (Dunnett's p, adjusted over the arms):", "",
                      _md_table(rep.dunnett[r]), ""]
    coded = design_matrix(data, factors)
    parts += ["", "## Design", "", f"Design {record.design or 'full'}, coded (-1/+1: first/second level):",
              "", _md_table(coded), "", "Alias structure:", "", *_fenced("\n".join(alias_structure(coded)))]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(parts) + "\n")
    return path
