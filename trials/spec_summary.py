"""What `trials validate` prints of a spec before anything runs: its design, aliases,
contrasts, primary terms and responses, and what its blocks leave each term's own error."""

from __future__ import annotations

from . import fraction, spec as specmod, validate


def cmd_validate(args) -> int:
    spec = validate.load_spec(args.spec)
    if not args.address:  # a local Ray is this machine: check now what it cannot give
        problems = validate.local_problems(spec)
        if problems:
            raise specmod.SpecError(problems)
    n_cells = len({t.cell for t in spec.trials if t.arm == "factorial"})
    n_controls = len(spec.controls)
    arms = f"{n_cells} cells" + (f" + {n_controls} control arm(s)" if n_controls else "")
    print(f"sweep '{spec.name}' is valid: design {spec.design}, {len(spec.factors)} factors, {arms} x "
          f"{spec.replicates} replicates = {len(spec.trials)} trials, run order randomised within each replicate")
    variants = {spec.wl.variant(t.config) for t in spec.trials}
    question = spec.wl.questions.get(variants.pop(), "") if len(variants) == 1 else ""
    if spec.description or question:  # the spec's own words, else the question its workload asks
        print(f"  {spec.description or question}")
    for f, levels in spec.factors.items():
        print(f"  {f}: {', '.join(levels)}")
    for line in fraction.alias_structure(spec):
        print("  " + line)
    for name, sides in spec.contrasts.items():
        show = {k: ", ".join(f"{f}={lv}" for f, lv in v.items()) for k, v in sides.items()}
        print(f"  contrast {name}: {show['from']} -> {show['to']} (each side averaged over the other factors)")
    if spec.primary_terms:
        print(f"  primary terms: {', '.join(spec.primary_terms)}")
    if spec.responses:
        print("  primary responses: " + ", ".join(f"{r} ({d['better']} is better, margin +-{margin_words(d['margin'])})"
                                                  for r, d in spec.responses.items()))
    else:
        print("  no primary responses declared: the analysis can say matters or undecided, never negligible")
    print("  " + own_error_line(spec))
    return 0


MIN_DF = 3  # analysis.result_types.MIN_DF: a term's own error on fewer df says too little


def never_decides(spec) -> bool:
    """Whether the spec's plan can never decide anything: its maximum leaves each term's own
    error fewer than MIN_DF df."""
    seq = spec.sequential or {}
    return bool(seq.get("max_replicates")) and seq["max_replicates"] <= MIN_DF and seq.get("block_errors",
                                                                                          "own") == "own"


def own_error_line(spec) -> str:
    """What the spec's blocks leave each term's own block-by-term error, before anything
    runs: a two-level term (and the control's paired contrast) has B - 1 df at B blocks, a
    factor of L levels (L - 1)(B - 1); below MIN_DF the verdicts say too few blocks."""
    b = spec.replicates
    most = spec.sequential.get("max_replicates") if spec.sequential else None
    least = MIN_DF + 1
    rule = spec.sequential.get("block_errors", "own") if spec.sequential else "own"
    if rule == "pooled":
        return ("each term is judged against the pooled residual (block_errors: pooled): its verdicts carry a "
                "caveat, since a seed that favours one arm is not in that error")
    line = (f"each term is judged against its own block x term error: {b - 1} df at {b} replicate block(s) for a "
            "two-level term or the control" + (" (a factor of L levels: (L - 1) x that)"
                                               if any(len(v) > 2 for v in spec.factors.values()) else ""))
    if most and most < least:
        line += (f"; the plan's maximum of {most} block(s) can never decide anything: no look tests a term on fewer "
                 f"than {MIN_DF} df, so it needs at least {least} blocks (raise sequential.max_replicates, or declare "
                 "block_errors: pooled)")
    elif b < least:
        line += (f"; fewer than {MIN_DF} df says too little, so verdicts need at least {least} blocks"
                 + (f" (the plan allows {most})" if most else " (declare sequential: {max_replicates: N} to grow it)"))
    elif most:
        line += f"; {most - 1} df at the plan's {most}"
    return line


def margin_words(margin) -> str:
    """A margin as `validate` states it: the number, or a relative one's share and reference."""
    if isinstance(margin, str):
        return f"{margin} of the control's mean, else of every factorial run's (resolved by the analysis)"
    return format(margin, "g")
