"""The attribution report of a sweep: `build_report` runs the statistics (`analysis.attribution`,
`analysis.verdicts`, `analysis.diagnostics`) and hands the results to the renderer
(`analysis.rendering.words`: terminal, Markdown, HTML). It leads with the answer: every term of every
primary response ends "matters", "negligible" or "undecided", with the estimate and the
interval the decision used, and for an undecided term what would decide it.

The header says which question the sweep answers (the seed's system or the paper's
architecture, from the runs' parallel stage). A response that is degenerate by
construction in that stage is named and not ranked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from trials.store.ui import UI_URL
from trials.timing.timing_settings import again_command

from .anova import AnalysisError
from .attribution import analyse, stage_of
from .coded_design import factorial_rows
from .diagnostics import DRIFT_ALPHA, against_control, analysable, choose_responses, drift_check, fraction_note
from trials.export import SweepFrame
from .sweep_reader import report_incomplete
from .rendering.answer_grid import verdict_table_text
from .rendering.words import brief_text, header_text, notes, summarise
from .rendering.files import write_html, write_markdown
from .record_check import checked
from .looks import look_for, look_shares, plan_prices
from .report_types import Report
from .variance import residuals
from .margins import margins_for
from .fits import response_models
from .verdicts import control_cells, decide_look


def _refuse_empty(sweep: SweepFrame) -> None:
    if not sweep.factors:
        raise AnalysisError("no factor.* tags in these runs: not a factorial sweep")
    if len(sweep.runs) == 0:
        gone = report_incomplete(sweep)  # why: each failed run's own error, where it has one
        raise AnalysisError("no finished runs to analyse" + (f"; {gone}" if gone else ""))


def _busy_caveat(decision, record) -> None:
    """The timed response's caveat where its last timing pass found busy rounds (`SweepRecord.busy_timing`)."""
    if (busy := record.busy_timing()) is not None and busy[0] in decision.checks:
        decision.caveats.setdefault(busy[0], []).append(
            f"{busy[1]} run-round(s) of the timing pass behind it depart from their run's median round by more than "
            f"half (a load during the pass, or repetitions too short to time steadily), so its values may skew these "
            f"verdicts; time it again on a quiet machine: {again_command(record.experiment, record.timing_summary())} (the verdicts a "
            f"look recorded stand; the new timings are used at the next look)")


def _verdict_residuals(models, r: str, terms: list[tuple[str, ...]]):
    """A response's residuals under the model its family's verdicts used (None: not modelled)."""
    if r not in models.models:
        return None
    return residuals(models.models[r], models.rows[r].index, terms)


def _checked_input(sweep: SweepFrame, check: bool) -> tuple[SweepFrame, list[str]]:
    """The sweep refused in one line where it has no runs, its recorded decisions checked
    against their runs where `check` (`analysis.record_check`: one line per look not used)."""
    _refuse_empty(sweep)
    return checked(sweep, _unchecked) if check else (sweep, [])


def _unchecked(sweep: SweepFrame) -> Report:
    """A look made again on its runs (`analysis.record_check`): the report at the defaults."""
    return build_report(sweep, None, check=False)


@dataclass(frozen=True)
class ReportSettings:
    """How `build_report` reads a sweep. `margins` (`--margin`) supply or override the spec's;
    every response with a margin is primary. `alpha` None is 0.05, or, for a sweep analysed
    look after look (`trials augment --until-decided`), the alpha its spending rule gives the
    look at this data; a given `alpha` or `margins` make the report a what-if. `typ`: the
    ANOVA's sums of squares (II where balanced, III otherwise, where None); `ui`: the MLflow UI
    the HTML's run links open; `unrecorded`: why the look is not recorded; `links`: the
    confirmations' lines; `check`: recorded decisions checked against their runs."""
    adjust: str = "bonferroni"
    typ: int | None = None
    alpha: float | None = None
    margins: dict[str, float] | None = None
    ui: str = UI_URL
    unrecorded: str = ""
    what_if: bool = False
    links: list[str] | None = None
    check: bool = True


def build_report(sweep: SweepFrame, out: str | Path | None, responses: list[str] | None = None,
                 how: ReportSettings | None = None, **given) -> Report:
    """The whole attribution of a sweep, written as HTML and Markdown under `out` (where
    given). `how`: the settings (`ReportSettings`), any of whose fields may be given by name."""
    how = replace(how or ReportSettings(), **given)
    adjust, typ, alpha, margins, links = how.adjust, how.typ, how.alpha, how.margins, how.links
    sweep, distrusted = _checked_input(sweep, how.check)
    df, factors, record = sweep.runs, list(sweep.factors), sweep.record
    rules = sweep.registry
    stage = stage_of(df, rules)
    declared = margins_for(record, margins, sweep.registry, df)
    chosen, skipped = choose_responses(df, responses, factors, primary=list(declared), experiment=record.experiment,
                                       rules=rules)
    data = factorial_rows(df, factors)
    chosen = analysable(data, chosen, factors, set(declared), skipped)
    block = "replicate" if data["replicate"].nunique() > 1 else None
    fraction = fraction_note(record.design, data, factors)
    results = analyse(df, chosen, factors, typ=typ, block=block, adjust="none", full_design=not fraction)
    models = response_models(df, chosen, factors, rules)
    look = look_for(sweep, look_shares(models, chosen, declared, rules), alpha, what_if=how.what_if or bool(margins))
    look.unrecorded, look.distrusted = how.unrecorded, distrusted
    controls = control_cells(df)
    decision = decide_look(sweep, chosen, declared, look, models, plan_prices(look, models, chosen, declared, rules),
                           adjust)
    look.record(decision.verdicts)
    noise = decision.noise
    family = [tuple(t.split(":")) for t in decision.primary_terms]
    drift = {r: d for r, res in results.items()
             if (d := drift_check(data, res, _verdict_residuals(models, r, family))) is not None}
    for r, (slope, p) in drift.items():  # a model that misses a drift over the run order: beside its verdicts
        if p < DRIFT_ALPHA and r in decision.checks and decision.checks[r].primary:
            decision.caveats.setdefault(r, []).append(
                f"its residuals drift over the run order within blocks (slope {slope:+.3g} per run, p = {p:.2g}): "
                "the model misses a trend, so its intervals may be too narrow")
    _busy_caveat(decision, record)
    dunnett, pooled = against_control(df, chosen, controls, decision.alpha_star)
    header = header_text(sweep, stage, factors, "\n".join([look.label(), *look.distrusted]), links)  # 1st screen
    closing = notes(sweep, data, chosen, fraction, bool(dunnett), skipped)
    summary = (header + "\n" + verdict_table_text(decision) + "\n" + summarise(decision, results, drift, noise, look)
               + closing)
    rep = Report(results, summary, None, skipped, dunnett, stage=stage, control=pooled, drift=drift,
                 decision=decision, look=look, noise=noise, links=list(links or []))
    rep.brief = brief_text(rep, sweep, header, closing)
    if out is not None:
        out = Path(out)
        rep.html_path = write_html(sweep, rep, factors, out, how.ui)
        rep.markdown_path = write_markdown(sweep, rep, factors, out / "report.md")
    return rep
