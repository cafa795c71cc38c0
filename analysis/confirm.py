"""`analysis plan NAME --confirm TERM`: the cheapest study that decides one question a
screening study left open, written as a runnable spec.

A screening factorial finds which questions are open; a focused study answers one. The
confirmatory spec holds only the two arms the question needs (a factor's two levels, a pair
of a several-level factor's levels, or a named contrast's two settings), every other factor
fixed at a level the user names (`--at FACTOR=LEVEL`; by default each factor's last level,
the corrected one in the shipped specs), one response with its margin, a family of that one
question, and a declared sequential plan with binding looks.

Its blocks come from the screening study's own-error model (`analysis.variance`), the
measure `analysis plan` prices more blocks with. There the term's estimate at B blocks has a
run-level variance v_run (its own block x term error: each block's contrast varies by
sigma_u^2 sum(w^2) from the runs, w the cells' weights, plus sigma_bt^2 from a seed that favours
one arm) and an items x term part v_it that blocks never shrink. In the two-arm study each
block is one run of each arm, so its contrast varies by 2 sigma_u^2 + sigma_bt^2:

    v_pair = min(2 sigma^2 + max(B v_run - sigma^2 sum(w^2), 0),  2 B v_run / sum(w^2))

with sigma the pooled residual sd. The first is the split of the own error between the runs and
block x term; where the own error is below what sigma implies (a negative sigma_bt^2), the
second, the own error itself with every bit of it run noise, takes over: the measured error is
never floored away by the pooled one (the two meet where sigma_bt^2 = 0). b blocks give
se^2 = v_pair / b + v_it on b - 1 df (the paired t).
The fixed-sample blocks
b* are the fewest (at least 4: a paired error on 3 df) at which the term is decided with the
chosen power if its effect is the screening estimate, at the study's whole alpha (a family
of one); the plan allows ceil(1.25 b*) blocks (Pocock-type spending over a few looks costs
about a fifth more at its maximum) and looks first at half of them, at least 4.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import astuple, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
import yaml

from trials.export import SweepFrame

from .anova import AnalysisError
from .screening import screening_spec
from .power import p_decided
from .sequential import MIN_DF
from .result_types import UNDECIDED, Verdict

MOST_BLOCKS = 5000
CONTROL_TERM = "vs control="  # a control arm's term in a decision (analysis.verdicts)
NEXT = "next"  # --confirm next: the open question the cheapest study decides
GROWTH = 1.25  # the plan's maximum over the fixed-sample blocks


def _arms(raw: dict, term: str, v: Verdict) -> tuple[str, dict[str, dict], list[str]]:
    """(the new factor's name, its two levels' overrides, the screening factors it spans).
    A control's term (`vs control=NAME`) becomes the factor NAME: its level `control` (the
    control's overrides) against `cell` (the factorial cell the other factors fix), so that its
    estimate keeps the screening's sign (the arms minus the control)."""
    factors, contrasts = raw["factors"], raw.get("contrasts") or {}
    if term.startswith(CONTROL_TERM):
        name = term[len(CONTROL_TERM):]
        controls = raw.get("controls") or {}
        if name not in controls:
            raise AnalysisError(f"--confirm {term}: the screening spec has no control {name!r} (its controls: "
                                f"{', '.join(controls) or 'none'})")
        return name, {"control": dict(controls[name] or {}), "cell": {}}, []
    if term in contrasts:
        sides = contrasts[term]
        arms = {}
        for side in ("from", "to"):
            name = "-".join(str(lv) for lv in sides[side].values())
            arms[name] = {k: val for f, lv in sides[side].items() for k, val in (factors[f][lv] or {}).items()}
        return term, arms, list(sides["from"])
    factor = term.split("[", 1)[0]
    if factor not in factors:
        raise AnalysisError(f"--confirm {term}: not a factor or named contrast of the screening spec (factors: "
                            f"{', '.join(factors)}; contrasts: {', '.join(contrasts) or 'none'})")
    pair = re.fullmatch(r".*\[(.+)->(.+)\]", term) or re.fullmatch(r"(.+) -> (.+)", v.label)
    if pair is None:
        raise AnalysisError(f"--confirm {term}: no level pair in its label {v.label!r}")
    low, high = pair[1], pair[2]
    return factor, {low: dict(factors[factor][low] or {}), high: dict(factors[factor][high] or {})}, [factor]


def _fixed(raw: dict, spanned: list[str], at: dict[str, str]) -> tuple[dict, dict[str, str]]:
    """The other factors' overrides at their chosen levels (`at`, else each one's last level)."""
    factors, base, chosen = raw["factors"], dict(raw.get("base") or {}), {}
    for f, levels in factors.items():
        if f in spanned:
            continue
        level = at.get(f, list(levels)[-1])
        if level not in levels:
            raise AnalysisError(f"--at {f}={level}: {f}'s levels are {', '.join(levels)}")
        chosen[f] = level
        base.update(levels[level] or {})
    unknown = sorted(set(at) - set(chosen))
    if unknown:
        raise AnalysisError(f"--at {unknown[0]}: not a factor held fixed here (those are {', '.join(chosen) or 'none'})")
    return base, chosen


def paired_noise(v: Verdict, sigma: float, sum_w2: float) -> tuple[float, float]:
    """(v_pair, v_it): one block's contrast variance in the two-arm study and the items x term
    part (module docstring)."""
    n = v.noise
    block = n.blocks * (n.seeds + n.item_run)  # one block's contrast in the screening: B v_run
    bt = max(block - sigma ** 2 * sum_w2, 0.0)
    # never above what the term's own error implies for one run an arm (sigma_bt^2 = 0, every
    # bit of it run noise): a pooled sigma above it says nothing of this term
    return max(min(2 * sigma ** 2 + bt, block * 2.0 / sum_w2), 1e-300), n.item_term


def blocks_for(v: Verdict, v_pair: float, v_it: float, alpha: float, power: float) -> int | None:
    """The fewest blocks (at least MIN_DF + 1) that decide the term with `power` if its effect is
    the screening estimate, at `alpha` in one look; None past MOST_BLOCKS."""
    for b in range(MIN_DF + 1, MOST_BLOCKS + 1):
        se = math.sqrt(v_pair / b + v_it)
        if p_decided(v.estimate, se, b - 1, alpha, v.margin) >= power:
            return b
    return None


def _verdict_for(decision, term: str, response: str | None) -> Verdict:
    """The term's verdict on `response`, else on the first primary response that left it
    undecided (else the first that has it); one line where none can be confirmed."""
    primary = decision.primary()
    candidates = [r for r in ([response] if response else primary) if any(v.term == term for v in decision.of(r))]
    if not candidates:
        terms = sorted({v.term for r in primary for v in decision.of(r) if v.in_family})
        raise AnalysisError(f"--confirm {term}: no such term of {response or 'the primary responses'} (the family's: "
                            f"{', '.join(terms)})")
    open_ = [r for r in candidates if any(v.verdict == UNDECIDED for v in decision.of(r) if v.term == term)]
    v = next(x for x in decision.of((open_ or candidates)[0]) if x.term == term)
    if v.noise is None or v.margin is None:
        raise AnalysisError(f"--confirm {term}: needs a term of a response with a margin and a variance model of its "
                            "own errors")
    return v


class _Price(NamedTuple):
    v: Verdict
    name: str  # the new factor
    arms: dict[str, dict]
    base: dict
    chosen: dict[str, str]  # the factors held fixed, at their levels
    v_pair: float
    v_it: float
    blocks: int | None  # the fixed-sample blocks; None past MOST_BLOCKS


def _price(sweep: SweepFrame, decision, raw: dict, v: Verdict, at: dict[str, str], alpha: float,
           power: float) -> _Price:
    """What the two-arm study of `v`'s term needs (module docstring)."""
    name, arms, spanned = _arms(raw, v.term, v)
    base, chosen = _fixed(raw, spanned, at)
    runs = sweep.runs
    factorial = runs[runs["arm"].astype(str) == "factorial"] if "arm" in runs.columns else runs
    cells = max(factorial["cell"].nunique(), 1)
    if v.term.startswith(CONTROL_TERM):  # a block's contrast: the arms' mean minus the one control run
        sum_w2 = 1.0 + 1.0 / cells
    else:  # each side the mean of the screening cells it averages
        sum_w2 = 2.0 / max(cells / 2 ** len(spanned), 1)
    v_pair, v_it = paired_noise(v, decision.checks[v.response].sigma, sum_w2)
    return _Price(v, name, arms, base, chosen, v_pair, v_it, blocks_for(v, v_pair, v_it, alpha, power))


def _cheapest(sweep: SweepFrame, decision, raw: dict, response: str | None, at: dict[str, str], alpha: float,
              power: float) -> _Price | None:
    """`--confirm next`: the open primary question (an undecided term of the family on
    `response`, else on any primary response) that the fewest blocks decide; None where none
    is open or none can be decided within MOST_BLOCKS."""
    responses = [response] if response else decision.primary()
    open_ = [v for r in responses for v in decision.of(r)
             if v.verdict == UNDECIDED and v.in_family and v.noise is not None and v.margin is not None]
    prices = []
    for v in open_:
        try:
            prices.append(_price(sweep, decision, raw, v, at, alpha, power))
        except AnalysisError:  # a term this spec cannot split into two arms is not the next one
            continue
    prices = [p for p in prices if p.blocks is not None]
    return min(prices, key=lambda p: p.blocks) if prices else None


@dataclass(frozen=True)
class ConfirmSettings:
    """Where `confirm` reads and writes, and what its study is sized for: `spec`, the screening's
    spec (the one saved with the sweep, then sweeps/NAME.yaml, where None); `out`, the new
    spec's path (beside the screening's where None); the `power` to decide at the `alpha`."""
    spec: str | None = None
    out: str | None = None
    power: float = 0.8
    alpha: float = 0.05


def confirm(sweep: SweepFrame, decision, term: str, response: str | None = None, at: dict[str, str] | None = None,
            how: ConfirmSettings | None = None, **given) -> str:
    """Write the confirmatory spec for `term` (`next`: the cheapest open one) and return what to
    print (module docstring); `how`'s fields (`ConfirmSettings`) may also be given by name."""
    spec, out, power, alpha = astuple(replace(how or ConfirmSettings(), **given))
    raw, source = screening_spec(sweep, spec)
    at = at or {}
    exp = sweep.record.experiment
    named = any(v.term == term for r in decision.primary() for v in decision.of(r))
    if term == NEXT and not named:
        p = _cheapest(sweep, decision, raw, response, at, alpha, power)
        if p is None:
            return (f"{exp}: no open question to confirm on {response or 'the primary responses'}: every primary "
                    "term is decided, or none is decided by a two-arm study within reach; nothing written")
        chose = (f"{exp}: the open question the cheapest study decides: {p.v.term} on {p.v.response} (undecided, "
                 f"{p.v.estimate:+.4g} [{', '.join(f'{x:+.4g}' for x in p.v.interval()[:2])}])")
    else:
        p, chose = _price(sweep, decision, raw, _verdict_for(decision, term, response), at, alpha, power), None
    v, r = p.v, p.v.response
    if p.blocks is None:
        raise AnalysisError(f"--confirm {v.term}: no study of up to {MOST_BLOCKS} blocks decides it at the measured "
                            f"noise (paired sd {math.sqrt(p.v_pair):.3g}, items x term sd {math.sqrt(p.v_it):.3g})")
    most = math.ceil(GROWTH * p.blocks)
    first = max(MIN_DF + 1, math.ceil(most / 2))
    fixed = ", ".join(f"{f}={lv}" for f, lv in p.chosen.items()) or "no other factor"
    several = len(decision.primary()) > 1  # the response in the name: one confirmation a response
    new = _confirming_spec(raw, p, exp, fixed, (first, most), alpha, several)
    timed = timing_of(sweep) if sweep.registry.is_timed(r) else None
    if timed:  # timed as the screening was, so the noise it was sized from is the noise it will meet
        new["timing"] = timed
    path = Path(out) if out else (source.parent if spec else Path("sweeps")) / f"{new['name']}.yaml"
    flags = "".join(f" --at {f}={lv}" for f, lv in at.items()) + (f" --response {r}" if several else "")
    header = (f"# written by `analysis plan {exp} --confirm {shlex.quote(v.term)}{flags}` from {source} and the "
              f"screening study's noise: paired sd {math.sqrt(p.v_pair):.3g} a block, items x term sd "
              f"{math.sqrt(p.v_it):.3g}\n")
    kept = write_new(path, header + yaml.safe_dump(new, sort_keys=False))
    minutes = _minutes(sweep.runs)
    cost = f", about {2 * most * minutes:.0f} worker-minutes at most" if minutes else ""
    how = (f"  timed as the screening was ({', '.join(f'{k} {n}' for k, n in timed.items())}; its spec's timing:): "
           "trials augment times each block itself before each look" if timed else
           "  timed by trials augment before each look, with trials time's defaults (no timing pass in the screening)"
           if sweep.registry.is_timed(r) else "")
    return "\n".join([
        *([chose] if chose else []),
        f"{exp}: a study that decides {v.term} on {r} alone: {path}" + (" (written before, unchanged)" if kept else ""),
        f"  arms: {p.name} = {' vs '.join(p.arms)}; fixed: {fixed}", *([how] if how else []),
        f"  blocks: {p.blocks} in one look ({power:.0%} if its effect is the screening's {v.estimate:+.4g}, "
        f"alpha {alpha:g} for this one question); the plan looks at {first} and again at {most}",
        f"  runs: {2 * first} to {2 * most}{cost}",
        f"  run it: trials run {path} && trials augment {new['name']} --until-decided"])


def write_new(path: Path, text: str) -> bool:
    """Write a file that does not exist yet, whole or not at all; True where it exists with
    this very text (written before: kept), one line where it exists with any other."""
    import os

    if path.is_file() and not path.is_symlink():
        try:
            if path.read_text() == text:
                return True
        except (OSError, UnicodeDecodeError):
            pass
    if not path.parent.is_dir():
        raise AnalysisError(f"{path}: its folder {path.parent} does not exist; nothing written")
    if path.exists() or path.is_symlink():  # a spec a study ran from, a note, the screening spec: never replaced
        raise AnalysisError(f"{path} exists; nothing is overwritten: name another file with --out-spec PATH")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    try:
        os.link(tmp, path)  # fails where the path exists, even if it appeared since the check
    except FileExistsError:
        raise AnalysisError(f"{path} exists; nothing is overwritten: name another file with --out-spec PATH") from None
    finally:
        tmp.unlink(missing_ok=True)
    return False


MAX_NAME = 64  # trials.spec.NAME_RE: the longest sweep name `trials run` accepts


def confirmation_name(exp: str, term: str, response: str | None = None) -> str:
    """`<screening>-confirm-<term>[-<response>]`, within MAX_NAME characters: a longer one is
    cut and keeps a short digest of the whole, so two questions never share a name."""
    import hashlib

    slug = lambda x: re.sub(r"[^A-Za-z0-9]+", "-", x).strip("-").lower()  # noqa: E731
    full = f"{exp}-confirm-{slug(term)}" + (f"-{slug(response)}" if response else "")
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[:MAX_NAME - 9].rstrip('-.')}-{digest}"


def _confirming_spec(raw: dict, p, exp: str, fixed: str, looks: tuple[int, int], alpha: float,
                     several: bool = False) -> dict:
    """The confirmation's spec: the two arms the price `p` chose, one response, a plan that looks
    at `looks` = (first, most) blocks (look_every: the blocks between), and its link to the
    screening study (`several`: the screening has more than one primary response, so the name
    says which)."""
    v, name, arms, base, (first, most) = p.v, p.name, p.arms, p.base, looks
    r, term = v.response, v.term
    lo, hi, _ = v.interval()  # the interval its verdict used
    return {"name": confirmation_name(exp, term, r if several else None),
            "description": (f"confirms {term} on {r} from the screening study {exp} (its estimate {v.estimate:+.4g} "
                            f"[{lo:+.4g}, {hi:+.4g}], {v.verdict}); two arms, {fixed} fixed"),
            **{k: raw[k] for k in ("workload",) if k in raw},
            "base": base, "factors": {name: arms}, "responses": {r: {"better": v.better, "margin": v.margin}},
            "sequential": {"max_replicates": most, "alpha": alpha, "look_every": max(1, most - first)},
            "confirms": {"study": exp, "term": term, "response": r, "estimate": float(v.estimate),
                         "low": float(lo), "high": float(hi), "verdict": v.verdict},
            "replicates": first, "design": "full",
            **{k: raw[k] for k in ("resources", "max_concurrent", "max_failures") if k in raw}}


def timing_of(sweep: SweepFrame) -> dict[str, int] | None:
    """The settings of the screening's last timing pass (its parent's `timing` record), as a
    spec's `timing:` takes them; None where it has none."""
    import json

    try:
        record = json.loads(sweep.record.timing) if sweep.record.timing else None
    except (TypeError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    keep = ("rounds", "warmup", "prompts", "steps", "seed")
    out = {k: record[k] for k in keep if isinstance(record.get(k), int) and not isinstance(record.get(k), bool)}
    return out or None


def _minutes(runs) -> float | None:
    if "run_s" not in runs.columns:
        return None
    s = float(np.nanmedian(runs["run_s"].to_numpy(dtype=float)))
    return s / 60 if math.isfinite(s) else None
