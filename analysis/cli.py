"""`analysis report EXPERIMENT`: attribution of a sweep's effects, as HTML and a summary."""

from __future__ import annotations

import argparse
import sys

from dspark.record import DEFAULT_TRACKING_URI

from .anova import AnalysisError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="analysis", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="ANOVA, effects, plots and an HTML report for one experiment")
    r.add_argument("experiment")
    r.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    r.add_argument("--out", default="reports", help="folder for <experiment>/report.html (default ./reports)")
    r.add_argument("--responses", nargs="+", help="metrics to analyse (default: the usual ones that vary)")
    r.add_argument("--adjust", default="holm", choices=["holm", "bh", "none"])
    r.add_argument("--parquet", help="read the runs from this parquet export instead of MLflow")
    r.add_argument("--no-log", action="store_true",
                   help="do not log the effects and the report on the sweep's parent run")
    pl = sub.add_parser("plan", help="replicates needed to detect an effect, from an experiment's residual sigma")
    pl.add_argument("experiment")
    pl.add_argument("--effect", type=float, required=True, help="the effect (high minus low) to detect")
    pl.add_argument("--response", action="append", help="response(s) to plan for (default: the stage's primary ones)")
    pl.add_argument("--power", type=float, default=0.8, help="the power wanted (default 0.8)")
    pl.add_argument("--alpha", type=float, default=0.05, help="two-sided test level (default 0.05)")
    pl.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    pl.add_argument("--parquet", help="read the runs from this parquet export instead of MLflow")
    nb = sub.add_parser("notebook", help="execute an attribution notebook on an experiment (nbclient)")
    nb.add_argument("name", choices=["attribution", "acceptance_curves"])
    nb.add_argument("experiment")
    nb.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    nb.add_argument("--responses", nargs="+", help="metrics to analyse (default: the stage's primary ones)")
    nb.add_argument("--out", default="reports", help="folder for <experiment>/<name>.ipynb, the executed notebook")
    e = sub.add_parser("export", help="write the runs of an experiment to parquet")
    e.add_argument("experiment")
    e.add_argument("path")
    e.add_argument("--tracking-uri", default=DEFAULT_TRACKING_URI)
    args = p.parse_args(argv)
    try:
        if args.command == "export":
            from .load import check_writable, load_runs, to_parquet

            check_writable(args.path)
            df = load_runs(args.experiment, args.tracking_uri)
            to_parquet(df, args.path)
            print(f"{len(df)} runs written to {args.path}")
            return 0
        from pathlib import Path

        if args.command == "notebook":
            from .notebook import execute

            path = execute(args.name, args.experiment, args.tracking_uri, Path(args.out), args.responses)
            print(f"executed notebook: {path}")
            return 0
        from .load import load_runs, read_parquet
        from .report import build_report

        df = read_parquet(args.parquet) if args.parquet else load_runs(args.experiment, args.tracking_uri)
        if args.command == "plan":
            from .plan import plan_text

            print(plan_text(df, args.effect, args.response, args.alpha, args.power))
            return 0
        rep = build_report(df, Path(args.out) / args.experiment, args.responses, args.adjust)
        print(rep.summary)
        print(f"report: {rep.html_path} (and {rep.markdown_path.name})")
        if not args.no_log and not args.parquet:
            from .report import log_to_parent

            n = log_to_parent(rep, df, args.tracking_uri)
            print(f"logged {n} attribution metrics and the report on the parent run {df.attrs['parent_run_id']}")
        return 0
    except AnalysisError as e:
        print(f"analysis: cannot analyse: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"analysis: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
