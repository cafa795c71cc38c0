"""`analysis report EXPERIMENT`: attribution of a sweep's effects, as HTML and a summary."""

from __future__ import annotations

import argparse
import sys

from .anova import AnalysisError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="analysis", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("report", help="ANOVA, effects, plots and an HTML report for one experiment")
    r.add_argument("experiment")
    r.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    r.add_argument("--out", default="reports", help="folder for <experiment>/report.html (default ./reports)")
    r.add_argument("--responses", nargs="+", help="metrics to analyse (default: the usual ones that vary)")
    r.add_argument("--adjust", default="holm", choices=["holm", "bh", "none"])
    r.add_argument("--parquet", help="read the runs from this parquet export instead of MLflow")
    e = sub.add_parser("export", help="write the runs of an experiment to parquet")
    e.add_argument("experiment")
    e.add_argument("path")
    e.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    args = p.parse_args(argv)
    try:
        if args.command == "export":
            from .load import load_runs, to_parquet

            df = load_runs(args.experiment, args.tracking_uri)
            to_parquet(df, args.path)
            print(f"{len(df)} runs written to {args.path}")
            return 0
        from pathlib import Path

        from .load import load_runs, read_parquet
        from .report import build_report

        df = read_parquet(args.parquet) if args.parquet else load_runs(args.experiment, args.tracking_uri)
        rep = build_report(df, Path(args.out) / args.experiment, args.responses, args.adjust)
        print(rep.summary)
        print(f"report: {rep.html_path}")
        return 0
    except AnalysisError as e:
        print(f"analysis: cannot analyse: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"analysis: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
