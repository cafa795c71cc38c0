"""The report's words: the terminal summary, the sentences that answer the question, the
notes, the next step and its command, the header and the parent run's note, from the results
`analysis.report.build_report` assembles. The verdict grid is `analysis.rendering.answer_grid`; a
response's own tables `analysis.rendering.tables`; the HTML and Markdown files
`analysis.rendering.files`."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd

from trials.store.ui import TRAINING_VIEW, md_text
from .answer_grid import answer_columns
from ..boundary_table import boundary_lines
from ..looks import LookResult
from ..text import BRIEF_WIDTH, wrap_text
from ..report_types import Report, ResponseResult
from ..decision import Decision
from ..result_types import BEYOND, MIN_DF, NEGLIGIBLE, UNDECIDED, UNSURE
from ..coded_design import factorial_rows, without_value
from ..diagnostics import DRIFT_ALPHA
from trials.export import SweepFrame
from ..item_kinds import count_column
from ..sweep_reader import report_incomplete
from ..variance import items_unused


def fmt(x, digits=4):
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, (float, np.floating)) else str(x)


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
