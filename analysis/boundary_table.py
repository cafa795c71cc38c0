"""A sequential plan's boundary table as `analysis plan` and the verbose report print it, in
the layout gsDesign and rpact print a design: for each primary response, every look taken
and every look the plan still declares, with its blocks, information fraction, df and the
nominal two- and one-sided levels (`analysis.boundaries`) its tests were held to."""

from __future__ import annotations

import numpy as np

from .boundaries import MIN_STEP, PATHS, nominal_levels, t_levels
from .looks import LookResult
from .sequential import MIN_DF


MAX_PLANNED_ROWS = 20  # planned looks shown past the last one taken


def boundary_rows(look: LookResult, response: str, per_test: float, df: float | None) -> list[dict]:
    """The plan's boundary table for one hypothesis of `response` (share `per_test` of alpha,
    its t statistic on `df` degrees of freedom at this look; None: normal), as gsDesign and
    rpact print a design: every look taken up to this one and the looks the plan still
    declares (every `look_every` blocks up to its maximum, at the information today's
    evaluation would give), each with its blocks, information fraction, df and nominal two-
    and one-sided levels; a look that tests nothing says why. Empty where no plan."""
    plan, now = look.plan, look.look
    if plan is None or now is None or not plan.planned or look.given:
        return []
    rows, chain = [], []
    tested = set(plan.tested(look.index, response))
    last_b = max(now.blocks - 1, 1)

    def df_at(blocks: int) -> float | None:
        return None if df is None else max(1.0, df * max(blocks - 1, 1) / last_b)

    for i, x in enumerate(plan.looks[:look.index]):
        t = x.fractions.get(response, x.t)
        status = (x.note or (f"decided {sum(k.split('|')[0] == response for k in x.decided)} (binding)"
                             if i + 1 in tested else
                             f"tests nothing: fewer than {MIN_DF + 1} blocks" if not plan.tests_at(x.blocks) else
                             "tests nothing: no new information"))
        rows.append({"look": str(i + 1), "blocks": x.blocks, "t": t, "df": df_at(x.blocks), "status": status,
                     "testing": i + 1 in tested})
    t_now, step = now.fractions.get(response, now.t), plan.look_every or 1
    # today's items' share of the information (1 where it counts blocks alone), kept at the planned looks
    items = t_now / (now.blocks / plan.max_replicates)
    items = 1.0 if abs(items - 1.0) < 0.02 else items
    b = now.blocks + step
    while b <= plan.max_replicates and len(rows) < look.index + MAX_PLANNED_ROWS:
        t = min(1.0, round(b / plan.max_replicates * items, 2))
        last_t = max([r["t"] for r in rows if r["testing"]], default=0.0)
        testing = plan.tests_at(b) and t >= last_t + MIN_STEP
        rows.append({"look": f"{len(rows) + 1} (planned)", "blocks": b, "t": t, "df": df_at(b), "testing": testing,
                     "status": "planned" if testing else "planned; tests nothing"})
        b = plan.max_replicates if b < plan.max_replicates and b + step > plan.max_replicates else b + step
    chain = [r for r in rows if r["testing"]]
    if chain:
        ts = [r["t"] for r in chain]
        if df is None:
            two, one = nominal_levels(ts, per_test, 2), nominal_levels(ts, per_test, 1)
        else:
            dfs = [r["df"] for r in chain]
            two, one = t_levels(ts, dfs, per_test, 2), t_levels(ts, dfs, per_test, 1)
        for r, a2, a1 in zip(chain, two, one):
            r["two_sided"], r["one_sided"] = a2, a1
    return rows


def boundary_text(look: LookResult, response: str, per_test: float, df: float | None, term: str = "") -> list[str]:
    """`boundary_rows` as the lines `analysis plan` and the verbose report print (`term`: the
    family term whose df they are)."""
    rows = boundary_rows(look, response, per_test, df)
    if not rows:
        return []
    how = ("normal statistics, exact recursion" if df is None else
           f"t statistics on their df, {df:.3g} at look {look.index}{' (' + term + ')' if term else ''}, scaled "
           "with blocks - 1 at the others: "
           f"simulated calibration, 2^{PATHS.bit_length() - 1} paths")
    out = [f"boundaries of {response} (alpha* {per_test:.3g} a hypothesis, Lan-DeMets Pocock-type; {how}):",
           f"  {'look':<12} {'blocks':>6} {'information':>11} {'df':>6} {'two-sided':>10} {'one-sided':>10}  status"]
    for r in rows:
        d = "-" if r["df"] is None else f"{r['df']:.3g}"
        two = f"{r['two_sided']:.3g}" if "two_sided" in r else "-"
        one = f"{r['one_sided']:.3g}" if "one_sided" in r else "-"
        out.append(f"  {r['look']:<12} {r['blocks']:>6} {r['t']:>11.0%} {d:>6} {two:>10} {one:>10}  {r['status']}")
    return out


def boundary_lines(decision, look: LookResult | None) -> list[str]:
    """The plan's boundary table for each primary response of `decision` (an
    `analysis.decision.Decision`), at the df of its first family term still open (or its
    first family term): what `analysis plan` and the verbose report print."""
    out = []
    if look is None:
        return out
    for r in decision.primary():
        fam = [v for v in decision.of(r) if v.in_family]
        if not fam:
            continue
        v = next((v for v in fam if v.verdict == "undecided"), fam[0])
        out += boundary_text(look, r, decision.alpha_star, v.df if np.isfinite(v.df) else None, v.term)
    return out
