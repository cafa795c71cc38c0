"""The timing pass against the sweep's own timing, on the same runs: the between-arm noise
of a timed response, as the factorial model's residual sigma, once from `trials time`'s
interleaved rounds (`spec/speedup`, `train/step_ms`) and once from the figures the trials
timed inside the sweep (`spec/speedup_sweep`, `train/step_ms_sweep`), and their ratio.

    python bench/timing_pass.py NAME [--tracking-uri sqlite:///mlflow.db]

The sweep must have had a timing pass (`trials time NAME`). Both responses are fitted as the
analysis fits them (`analysis.model.fit_response`: the estimable terms, the replicate as
a block) on the factorial runs that hold both, so the two sigmas have the same residual
degrees of freedom; a ratio below 1 is the noise the pass removed.
"""

from __future__ import annotations

import argparse
import math
import sys
from trials.store.client import tracking_client

PAIRS = (("spec/speedup", "spec/speedup_sweep"), ("train/step_ms", "train/step_ms_sweep"))


def residual_sigmas(df, factors: list[str]) -> list[dict]:
    """Per timed response the sweep holds both ways: the two residual sigmas, their ratio
    and the residual df, fitted on the same runs."""
    import pandas as pd

    from analysis.coded_design import factorial_rows
    from analysis.model import fit_response

    data = factorial_rows(df, factors)
    block = "replicate" if "replicate" in data.columns and data["replicate"].nunique() > 1 else None
    out = []
    for timed, sweep in PAIRS:
        if timed not in data.columns or sweep not in data.columns:
            continue
        both = data[pd.to_numeric(data[timed], errors="coerce").notna()
                    & pd.to_numeric(data[sweep], errors="coerce").notna()]
        fits = {r: fit_response(both, r, factors, block) for r in (timed, sweep)}
        sigma = {r: math.sqrt(float(f.result.scale)) for r, f in fits.items()}
        out.append({"timed": timed, "sweep": sweep, "sigma_pass": sigma[timed], "sigma_sweep": sigma[sweep],
                    "ratio": sigma[timed] / sigma[sweep] if sigma[sweep] > 0 else float("nan"),
                    "df": int(fits[timed].result.df_resid), "runs": len(both),
                    "rounds": _one(both, "timing/rounds")})
    return out


def _one(data, column: str) -> str:
    values = sorted(set(data[column].dropna())) if column in data.columns else []
    return "/".join(f"{v:g}" for v in values) or "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="the sweep (its MLflow experiment)")
    ap.add_argument("--tracking-uri", default="sqlite:///mlflow.db", help="the sweep's MLflow store")
    args = ap.parse_args(argv)
    from analysis.anova import AnalysisError
    from analysis.sweep_reader import load_runs

    try:
        sweep = load_runs(args.name, args.tracking_uri)
        df, factors = sweep.runs, list(sweep.factors)
        rows = residual_sigmas(df, factors)
    except (AnalysisError, ValueError) as e:
        print(f"timing_pass: error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"timing_pass: error: {args.name} holds no timed response both ways; run `trials time {args.name}` "
              "first", file=sys.stderr)
        return 2
    first = first_points(df, args.tracking_uri)
    for r in rows:
        print(f"{args.name}: {r['timed']}, residual sigma of the factorial model on {r['runs']} runs "
              f"(residual df {r['df']}):")
        print(f"  timing pass ({r['rounds']} interleaved rounds, {r['timed']})  {r['sigma_pass']:.4g}")
        print(f"  during the sweep ({r['sweep']})  {r['sigma_sweep']:.4g}")
        print(f"  ratio pass / sweep  {r['ratio']:.3f}")
        if r["sweep"] in first:  # a re-evaluation timed it again: the trials' own figure is the first point
            df2 = df.copy()
            df2[r["sweep"]] = df2["run_id"].map(first[r["sweep"]])
            again = {x["sweep"]: x for x in residual_sigmas(df2, factors)}[r["sweep"]]
            print(f"  {r['sweep']} is the re-evaluation's (one or two runs at a time, after training); the "
                  f"trials' own figure, timed while they trained: {again['sigma_sweep']:.4g}, ratio pass / that "
                  f"{r['sigma_pass'] / again['sigma_sweep']:.3f}")
    return 0


def first_points(df, uri: str) -> dict[str, dict[str, float]]:
    """Per `..._sweep` response that a re-evaluation logged again (a run holds more than one
    point of it): each run's first point, the one its trial timed while it trained."""
    client = tracking_client(uri)
    out: dict[str, dict[str, float]] = {}
    for _, sweep in PAIRS:
        if sweep not in df.columns or "run_id" not in df.columns:
            continue
        hist = {rid: sorted(client.get_metric_history(rid, sweep), key=lambda m: (m.step, m.timestamp))
                for rid in df["run_id"].dropna()}
        if any(len(h) > 1 for h in hist.values()):
            out[sweep] = {rid: h[0].value for rid, h in hist.items() if h}
    return out


if __name__ == "__main__":
    sys.exit(main())
