"""`analysis report EXPERIMENT`: attribution of a sweep's effects, as HTML and a summary."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from trials.store.client import DEFAULT_TRACKING_URI, absolute_uri, check_store, run_command
from trials.store.ui import default_ui_url, exact_options
from trials.store.probe import probe_store
from trials.store.keys import sweep_parent
from trials.store.reader import reading_client

from .text import wrap_text
from . import links
from .anova import AnalysisError
from .margins import parse_margins
from .sweep_reader import load_runs, read_parquet
from trials.export import check_writable, to_parquet
from trials.sweep_record import parent_workload
from trials.workload import load_workload
from .rendering.notebook import answer, check_notebook_name, execute, notebook_file
from .results import rebuild, study_folders


EXP_HELP = "the sweep's MLflow experiment (its name)"
URI_HELP = "MLflow store; a relative sqlite path is read from the current folder"
NO_LOG_HELP = ("do not log the verdicts and the report on the sweep's parent run (the look itself is recorded all the "
               "same: every analysis that prints verdicts is one)")


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    p = argparse.ArgumentParser(prog="analysis", description=__doc__, formatter_class=fmt)
    sub = p.add_subparsers(dest="command", required=True)
    _add_report(sub, fmt)
    pl = sub.add_parser("plan", help="replicates needed to detect an effect, from an experiment's residual sigma",
                       formatter_class=fmt)
    pl.add_argument("experiment", help=EXP_HELP)
    pl.add_argument("--effect", type=float,
                    help="the effect (high minus low) to detect (none: plan what would decide each undecided term)")
    pl.add_argument("--margin", action="append", metavar="RESPONSE=VALUE",
                    help="a primary response's margin (repeatable; supplies or overrides the spec's)")
    pl.add_argument("--response", action="append", help="response(s) to plan for (none: the stage's primary ones)")
    pl.add_argument("--power", type=float, default=0.8, help="the power wanted")
    pl.add_argument("--all", action="store_true", dest="every",
                    help="every undecided term of every response (default: the primary terms of the primary responses)")
    pl.add_argument("--alpha", type=float, help="the familywise level (none: the report's: 0.05, or the current "
                                                "look's under a sweep's sequential rule)")
    pl.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help=URI_HELP)
    pl.add_argument("--parquet", help="read the runs from this parquet export instead of MLflow (none: read MLflow)")
    pl.add_argument("--confirm", metavar="TERM",
                    help="write the cheapest study that decides TERM alone (a factor, a level pair or a named contrast)")
    pl.add_argument("--at", action="append", metavar="FACTOR=LEVEL",
                    help="with --confirm: a factor held fixed at this level (repeatable; none: each one's last level)")
    pl.add_argument("--spec", help="with --confirm: the screening study's spec (none: sweeps/EXPERIMENT.yaml)")
    pl.add_argument("--out-spec", help="with --confirm: where to write the new spec (none: beside the screening one)")
    nb = sub.add_parser("notebook", help="execute a shipped notebook on an experiment (nbclient)",
                       formatter_class=fmt)
    nb.add_argument("name", help="which notebook: attribution (the engine's), or one the sweep's workload ships "
                                 "(DSpark's: acceptance_curves)")
    nb.add_argument("experiment", help=EXP_HELP)
    nb.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help=URI_HELP)
    nb.add_argument("--responses", nargs="+", help="metrics to analyse (none: the stage's primary responses that vary)")
    nb.add_argument("--out", default="reports", help="folder for <experiment>/<name>.ipynb, the executed notebook")
    nb.add_argument("--margin", action="append", metavar="RESPONSE=VALUE",
                    help="a primary response's margin (repeatable; supplies or overrides the spec's)")
    _add_results(sub, fmt)
    _add_recap(sub, fmt)
    e = sub.add_parser("export", help="write the runs of an experiment to parquet",
                       formatter_class=fmt)
    e.add_argument("experiment", help=EXP_HELP)
    e.add_argument("path", help="the parquet file to write (its folder must exist)")
    e.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help=URI_HELP)
    exact_options(p)
    return p


def _export(args) -> int:
    check_writable(args.path)
    sweep = load_runs(args.experiment, args.tracking_uri)
    to_parquet(sweep, args.path)
    print(f"{len(sweep.runs)} runs written to {args.path}")
    return 0


def _add_report(sub, fmt) -> None:
    r = sub.add_parser("report", help="ANOVA, effects, plots and an HTML report for one experiment",
                       formatter_class=fmt)
    r.add_argument("experiment", help=EXP_HELP)
    r.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help=URI_HELP)
    r.add_argument("--out", default="reports", help="folder for <experiment>/report.html")
    r.add_argument("--responses", nargs="+", help="metrics to analyse (none: the stage's primary responses that vary)")
    r.add_argument("--adjust", default="bonferroni", choices=["bonferroni", "none"],
                   help="multiplicity adjustment over every (primary response, term) verdict")
    r.add_argument("--alpha", type=float,
                   help="the familywise level of every verdict (none: 0.05, or for a sweep augmented look after "
                        "look the alpha its spending rule gives the current look)")
    r.add_argument("--margin", action="append", metavar="RESPONSE=VALUE",
                   help="a primary response's margin (repeatable; supplies or overrides the spec's)")
    r.add_argument("--parquet", help="read the runs from this parquet export instead of MLflow (none: read MLflow)")
    r.add_argument("--ui-url", help="the MLflow UI the report's run links open (none: the tracking server itself, "
                                    "or http://127.0.0.1:5000 where `mlflow ui` serves a file store)")
    r.add_argument("--no-log", action="store_true", help=NO_LOG_HELP)
    r.add_argument("--verbose", action="store_true",
                   help="print every term's detail (each response's fit, noise and drift; every interaction) after "
                        "the answer, as the report's summary holds it")


def _add_recap(sub, fmt) -> None:
    rc = sub.add_parser("recap", help="the answers of several sweeps, one after another: each one's verdict table "
                                      "and a sentence per primary response (no file written; a new look is recorded as by report)",
                        formatter_class=fmt)
    rc.add_argument("experiments", nargs="+", help="the sweeps' MLflow experiments (their names)")
    rc.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI, help=URI_HELP)


def _add_results(sub, fmt) -> None:
    rs = sub.add_parser("results", help="rebuild committed study reports (report.html, report.md, summary.txt) from "
                                        "their runs.parquet", formatter_class=fmt)
    rs.add_argument("folders", nargs="*", help="study folders (none: every results/*/ holding runs.parquet)")


def _results(args) -> int:
    folders = [Path(f) for f in args.folders] or study_folders()
    if not folders:
        raise AnalysisError("results: no study folder (results/*/runs.parquet) here")
    for folder in folders:
        print(f"rebuilt {rebuild(folder).parent}")
    return 0


def _notebook(args) -> int:
    margins = parse_margins(args.margin)  # refused before any work, as the store's answer is
    check_notebook_name(args.name)
    uri = absolute_uri(args.tracking_uri)
    check_store(uri)  # a SQLite file that is not there is said, not made
    probe_store(uri)
    client = reading_client(uri)
    if (exp := client.get_experiment_by_name(args.experiment)) is None:
        raise AnalysisError(f"experiment {args.experiment!r} does not exist in {uri}")
    notebook = notebook_file(args.name, lambda: _swept_workload(client, exp.experiment_id, args.experiment))
    path = execute(notebook, args.experiment, args.tracking_uri, Path(args.out), args.responses, margins=margins)

    shown = answer(path)
    if shown:
        print(shown)
    print(f"executed notebook: {path} (every response's details, plots and the reading in it)")
    return 0


def _swept_workload(client, experiment_id: str, experiment: str):
    """The workload a sweep's parent run names (installed or allowed only: `load_workload`),
    read off its tags alone; one line where the sweep has no parent to name it."""
    parent = sweep_parent(client, experiment_id)
    if parent is None:
        raise AnalysisError(f"sweep {experiment!r} has no parent run to name its workload, whose notebooks these "
                            "would be")
    return load_workload(parent_workload(parent.data.tags))


def _recap(args) -> int:
    """Each sweep's question in a line, its verdicts and a sentence per primary response."""
    import textwrap

    from .rendering.words import BRIEF_WIDTH, answer_lines, next_command
    from .report import build_report

    probe_store(args.tracking_uri)
    frames = [load_runs(e, args.tracking_uri) for e in args.experiments]  # every sweep read before any is printed
    steps = []
    for i, sweep in enumerate(frames):
        rep = build_report(sweep, None)
        _record(rep.look, sweep, args)  # verdicts printed are a look, as `analysis report`'s are
        record = sweep.record
        head = f"=== {record.experiment}: "
        print(("\n" if i else "") + head + textwrap.shorten(record.description or "(no description)",
                                                          BRIEF_WIDTH - len(head) - 4, placeholder=" ...") + " ===")
        print("\n".join(answer_lines(rep.decision)))
        print("\n".join(wrap_text(f"{rep.decision.counts_text()}; every detail: analysis report {record.experiment}",
                                  "  ")))
        for line in links.confirmation_lines(links.in_store(args.tracking_uri, record.experiment)):
            print("\n".join(wrap_text(line, "  ")))
        steps.append(next_command(rep.decision, record.experiment, rep.look))
    cost, command = min(steps, key=lambda s: s[0])  # the cheapest, last: where the eye ends
    print(f"\nnext ({'the fewest blocks that decide a term' if cost < math.inf else 'no block count decides one'}):"
          f"\n  {command}")
    return 0


def _report_or_plan(args) -> int:
    margins = parse_margins(args.margin)  # refused before any work
    if getattr(args, "alpha", None) is not None and not 0 < args.alpha < 0.5:
        raise AnalysisError(f"--alpha: must lie in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got {args.alpha!r}")
    if not args.parquet:  # before any work: the store answers, within a bounded time

        probe_store(args.tracking_uri)
    sweep = read_parquet(args.parquet) if args.parquet else load_runs(args.experiment, args.tracking_uri)
    unrecorded = "read from a parquet export" if args.parquet else ""
    if args.command == "plan" and args.confirm:
        return _confirm(sweep, args, margins)
    if args.command == "plan":
        from .plan import plan_with_look

        text, look = plan_with_look(sweep, args.effect, args.response, args.alpha, args.power, margins, unrecorded,
                                    args.every)
        print(text)
        _record(look, sweep, args)
        return 0

    from .report import build_report

    # a report whose margins, responses, alpha or adjustment differ from the spec's is a what-if:
    # its own folder, nothing logged, no look recorded
    what_if = bool(margins or args.responses or args.alpha is not None or args.adjust != "bonferroni")
    out = Path(args.out) / args.experiment / ("what-if" if what_if else "")
    rep = build_report(sweep, out, args.responses, adjust=args.adjust, alpha=args.alpha, margins=margins,
                       ui=args.ui_url or default_ui_url(None if args.parquet else args.tracking_uri),
                       unrecorded=unrecorded, what_if=what_if, links=_links(sweep, args))
    print(rep.summary if args.verbose else rep.brief)
    _record(rep.look, sweep, args)
    shown = os.path.relpath(rep.html_path)
    print(f"report: {rep.html_path if shown.startswith('..') else shown} (and {rep.markdown_path.name}; every "
          "term's detail: --verbose)")
    if what_if and not args.parquet:
        print("what-if (margins, responses, alpha or adjustment given): nothing logged on the parent run;\n"
              "  the sweep's own report is `analysis report " + args.experiment + "`")
    elif not args.no_log and not args.parquet:
        from .publish import log_to_parent

        log_to_parent(rep, sweep, args.tracking_uri)
        print(f"logged on the parent run {sweep.record.parent_run_id}: the answer (its description), "
              "the verdicts, the report")
    return 0


def _links(sweep, args) -> list[str]:
    """The confirmations run for this study, each with its verdict: in the same store, or
    beside a parquet export's folder (analysis.links)."""
    name = sweep.record.experiment
    found = (links.in_folders(Path(args.parquet).parent, name) if args.parquet
             else links.in_store(args.tracking_uri, name))
    return links.confirmation_lines(found)


def _confirm(sweep, args, margins) -> int:
    """`analysis plan NAME --confirm TERM`: the confirmatory spec written, what it costs said."""
    from .confirm import confirm
    from .report import build_report

    from .plan import check_arguments

    check_arguments(None, 0.05 if args.alpha is None else args.alpha, args.power)  # before any work, one line
    at = {}
    for item in args.at or []:
        factor, sep, level = item.partition("=")
        if not sep or not factor or not level:
            raise AnalysisError(f"--at: expected FACTOR=LEVEL, got {item!r}")
        at[factor] = level
    rep = build_report(sweep, None, margins=margins or None)
    print(confirm(sweep, rep.decision, args.confirm, (args.response or [None])[0], at, spec=args.spec,
                  out=args.out_spec, power=args.power, alpha=0.05 if args.alpha is None else args.alpha))
    return 0


def _record(look, sweep, args) -> None:
    """A new look of the sweep, read from its store, is recorded on the parent run (what-ifs
    and parquet exports are not)."""
    if look is None or not (look.new or look.sealed) or look.what_if or getattr(args, "parquet", None):
        return
    from .publish import record_look

    record_look(sweep, args.tracking_uri, look.plan.to_json(), look.label(), look.index)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = {"export": _export, "notebook": _notebook, "results": _results,
               "recap": _recap}.get(args.command, _report_or_plan)
    cannot = (AnalysisError, 2, lambda e: [f"cannot analyse: {e}"])
    return run_command("analysis", lambda: command(args), str(getattr(args, "tracking_uri", "") or ""), (cannot,))


if __name__ == "__main__":
    sys.exit(main())
