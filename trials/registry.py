"""A workload's metric registry, as the engine and the statistics read it: which direction
is better, where a metric is not measured, degenerate or constant, which are headline
columns and which are wall-clock (timed), and a spec's declaration of a primary response.

The workload supplies the rows (`Workload.metrics`: `lookup(name)` returns a row with the
fields below, or None; `DEFAULT_RESPONSES` maps a variant to its default responses); the
rules here are the engine's, the same for every workload. A row has: `name`, `better`
('higher', 'lower' or ''), `unit`, `stages` (the variants that measure it), `meaning`,
`degenerate_in` and `constant_in` (variant -> why), `headline`, `timed`, `items`: the
evaluation count (a column of the run) its items are drawn on, `degenerate_when`: the
sibling columns that say a response cannot rank the runs at hand (`flat_problem`), and
`curve`: a family (`x@1`, `x@2`, ...) the report plots as one curve, under this title, and
on an evaluation count's own row `raised_by`: the config field `trials reeval --FIELD N`
raises that count with (one of the workload's `reeval_counts`), and `item_seconds`: the
column of the seconds one of its items costs a run (a plan prices more items with it), and
`mean_of_items`: the response is a mean over its items, so that the value of each item group
a run keeps as `split/<name>@g<i>` (runs recorded before the jackknife) is a pseudo-value.
A sweep's record keeps the rows as data (`recorded`); a record kept before rows carried some
of these declarations (`DECLARATIONS`) takes them from the workload's current rows
(`with_declarations`), so that the statistics read declarations only, never names.

An evaluation's item records are not metrics: a workload reports them as `items`
(`trials.store.items`, where their column names live).
Plain Python: importing it loads no workload, torch or MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trials.store.record import margin_problem

PRIMARY_FORM = "{better: higher|lower, margin: NUMBER or PERCENT such as 10%}"


def plain_number(value):
    """A reported value as a plain Python int or float: itself, or a numpy number's or 0-d
    tensor's `.item()`; None where it is no number (text, a bool, a tensor of many values)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            got = item()
        except (ValueError, RuntimeError, TypeError):
            return None  # a tensor or array of more than one value
        return got if isinstance(got, (int, float)) and not isinstance(got, bool) else None
    return None


def results_problem(metrics: dict, responses, timed=lambda name: False) -> str | None:
    """Why a trial's final metrics cannot serve the sweep's primary responses (one never
    reported, not a number, or not finite), or None; `timed(name)`: a response the timing
    pass measures later, not the trial."""
    for name in responses:
        if timed(name):
            continue
        if name not in metrics:
            return f"primary response {name!r} was never reported"
        v = metrics[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"primary response {name!r} is {type(v).__name__} {str(v)[:40]!r}, not a number"
        if not math.isfinite(v):
            return f"primary response {name!r} is {v!r}, not a finite number"
    return None


@dataclass(frozen=True)
class Registry:
    """The rules over one workload's metric rows (`metrics`: see the module docstring), and
    the config field that names a run's variant (DSpark: `parallel_stage`; "" where none)."""
    metrics: object
    variant_field: str = ""

    def lookup(self, name: str):
        return self.metrics.lookup(name)

    def better(self, name: str) -> str:
        """'higher' or 'lower' is better ('higher' for a name the registry does not know)."""
        m = self.lookup(name)
        return m.better if m is not None and m.better else "higher"

    def is_timed(self, name: str) -> bool:
        """A wall-clock response of the timing pass (more evaluation items do not reduce its noise)."""
        m = self.lookup(name)
        return bool(m is not None and getattr(m, "timed", False))

    def below_break_even(self, name: str, means) -> str | None:
        """What it means that every arm's mean of a ratio lies below its break-even (a row's
        optional `break_even` and `below`), or None: a sentence beside the verdicts."""
        m = self.lookup(name)
        even = getattr(m, "break_even", None) if m is not None else None
        if even is None or not len(means) or max(means) >= even:
            return None
        return (f"every arm's {name} is below {even:g} (at most {max(means):.3g}): "
                + (getattr(m, "below", "") or f"each arm is worse than the baseline {name} is relative to"))

    def item_count(self, name: str) -> str:
        """The column holding the evaluation count a response's items are drawn on (its row's
        `items`), or "" where its row declares none."""
        m = self.lookup(name)
        return str(getattr(m, "items", "") or "") if m is not None else ""

    def raised_by(self, count: str) -> str:
        """The config field a re-evaluation raises an evaluation count (a column such as
        `split/examples`) with, as its row declares it; "" where none does."""
        m = self.lookup(count)
        return str(getattr(m, "raised_by", "") or "") if m is not None else ""

    def mean_of_items(self, name: str) -> bool:
        """A mean over its items (its row's `mean_of_items`): its item groups' own values are
        its pseudo-values."""
        m = self.lookup(name)
        return bool(m is not None and getattr(m, "mean_of_items", False))

    def item_seconds(self, count: str) -> str:
        """The column holding what one item of an evaluation count costs a run, in seconds (its
        row's `item_seconds`: a plan prices more items with it); "" where its row declares none."""
        m = self.lookup(count)
        return str(getattr(m, "item_seconds", "") or "") if m is not None else ""

    def flat_rule(self, name: str) -> dict | None:
        """A response's `degenerate_when` (its row's, `FLAT_KEYS`), with `{at}` filled in by the
        name's suffix after `@` (`x@R64`: R64); None where its row declares none."""
        m = self.lookup(name)
        rule = getattr(m, "degenerate_when", None) if m is not None else None
        return at_filled(rule, name) if rule else None

    def curves(self, columns) -> dict[str, list[str]]:
        """The curves a report plots: title -> the columns of a family whose row declares
        `curve` (its title), one per whole-number suffix after `@`, in the suffix's order."""
        out: dict[str, list[tuple[int, str]]] = {}
        for c in columns:
            m = self.lookup(c) if isinstance(c, str) and "@" in c else None
            at = c.rsplit("@", 1)[1] if m is not None else ""
            if m is not None and getattr(m, "curve", "") and at.isdigit():
                out.setdefault(m.curve, []).append((int(at), c))
        return {title: [c for _, c in sorted(cols)] for title, cols in out.items()}

    def timed(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics.REGISTRY if getattr(m, "timed", False))

    def degenerate_reason(self, variant: str | None, name: str) -> str | None:
        """Why a metric cannot rank arms in a variant, or None."""
        m = self.lookup(name)
        return (getattr(m, "degenerate_in", None) or {}).get(variant or "") if m is not None else None

    def unmeasured_reason(self, variant: str | None, name: str) -> str | None:
        """Why a variant cannot give a metric at all (not measured there, degenerate or
        constant), or None."""
        m = self.lookup(name)
        if m is None or variant is None:
            return None
        stages = getattr(m, "stages", ())
        if stages and variant not in stages:  # no stages: measured in every variant
            return f"not measured in the {variant} stage (measured in: {', '.join(stages)})"
        return (getattr(m, "degenerate_in", None) or {}).get(variant) or \
            (getattr(m, "constant_in", None) or {}).get(variant)

    def headline(self, variant: str | None = None) -> tuple[str, ...]:
        """The headline columns, those a variant measures when given."""
        return tuple(m.name for m in self.metrics.REGISTRY if getattr(m, "headline", False)
                     and (variant is None or self.unmeasured_reason(variant, m.name) is None))

    def default_responses(self, variant: str | None) -> tuple[str, ...]:
        """The responses a report analyses by default for a variant (every headline one where
        the variant is unknown or mixed)."""
        return tuple(getattr(self.metrics, "DEFAULT_RESPONSES", {}).get(variant or "", self.headline()))

    def all_default_responses(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r for rs in getattr(self.metrics, "DEFAULT_RESPONSES", {}).values() for r in rs))

    def primary_response(self, name: str, decl, where: str) -> tuple[dict | None, str | None]:
        """One primary response as a spec declares it (`name: {better, margin}`), checked: a
        metric the registry knows, a finite margin > 0, and a better direction that is the
        registry's (stated or left out). Returns (the clean declaration, None) or (None, one
        line starting with `where`). The spec and the analysis's readers of a recorded
        sweep (a parquet export, a parent run) check alike here."""
        known = self.lookup(name)
        if known is None:
            names = getattr(self.metrics, "names", None)  # a user's workload: its own list; DSpark's: the doc
            return None, (f"{where}: not a metric the trainer reports (its metrics: {', '.join(names()[:12])})"
                          if callable(names) else f"{where}: not a metric the trainer reports (see docs/responses.md)")
        if not isinstance(decl, dict) or set(decl) - {"better", "margin"}:
            return None, f"{where}: must be {PRIMARY_FORM}"
        problem = margin_problem(decl.get("margin"))
        if problem:
            return None, f"{where}.margin: {problem}"
        direction = decl.get("better", known.better)
        if direction not in ("higher", "lower"):
            return None, f"{where}.better: 'higher' or 'lower', got {direction!r}"
        if known.better and direction != known.better:
            return None, f"{where}.better: {known.better} is better for {name}, not {direction}"
        margin = decl["margin"]
        return {"better": direction, "margin": margin.strip() if isinstance(margin, str) else float(margin)}, None


ROW_FIELDS = ("name", "better", "unit", "stages", "meaning", "degenerate_in", "constant_in", "headline", "timed",
              "break_even", "below", "items", "degenerate_when", "curve", "raised_by", "item_seconds", "mean_of_items")
# what a row declares for the statistics (read by no name): a record kept before rows carried
# one of them reads it from the workload's current row (`with_declarations`)
DECLARATIONS = ("items", "degenerate_when", "curve", "raised_by", "item_seconds", "mean_of_items")
FLAT_KEYS = ("flag", "same", "why")  # a row's `degenerate_when`


@dataclass(frozen=True)
class Row:
    """A metric's registry row as plain data (what a recorded registry holds)."""
    name: str
    better: str = ""
    unit: str = ""
    stages: tuple = ()
    meaning: str = ""
    degenerate_in: dict | None = None
    constant_in: dict | None = None
    headline: bool = False
    timed: bool = False
    break_even: float | None = None
    below: str = ""
    items: str = ""
    degenerate_when: dict | None = None
    curve: str = ""
    raised_by: str = ""
    item_seconds: str = ""
    mean_of_items: bool = False


class RecordedMetrics:
    """A workload's registry as a sweep's record keeps it (`recorded`): each metric name the
    runs hold, resolved to its row, so that a parquet export is analysed without importing
    any workload. `lookup` is by exact name: the names were resolved when it was recorded.
    `declares`: the declarations (`DECLARATIONS`) its rows carry, every one they could."""

    def __init__(self, rows: dict[str, Row], default_responses: dict[str, tuple], declares: tuple = DECLARATIONS):
        self._rows = rows
        self.REGISTRY = tuple(rows.values())
        self.DEFAULT_RESPONSES = default_responses
        self.declares = declares

    def lookup(self, name: str):
        return self._rows.get(name)


def at_filled(rule: dict, name: str) -> dict[str, str]:
    """A `degenerate_when` rule for one response of its family: `{at}` is the name's suffix
    after `@` (`x@R64`: R64)."""
    at = name.split("@", 1)[1] if "@" in name else ""
    return {k: str(v).replace("{at}", at) for k, v in rule.items()}


def flat_problem(rule) -> str | None:
    """Why a row's `degenerate_when` is not one: {flag, same, why}, each text (or None where
    it is left out). The response cannot rank runs where every run's `flag` column is 1 and its
    `same` column holds one value across them; `why` says so ({same}: that value)."""
    if rule is None:
        return None
    if not isinstance(rule, dict) or set(rule) != set(FLAT_KEYS) or not all(isinstance(v, str) for v in rule.values()):
        return "degenerate_when: {flag, same, why}, each text"
    return None


def declaration_problem(row) -> str | None:
    """Why a workload's row declares what the statistics read in a form no record keeps (the
    count, curve and columns as text, `mean_of_items` true or false, a `degenerate_when`), or None."""
    wrong = [f for f in ("items", "curve", "raised_by", "item_seconds") if not isinstance(getattr(row, f, "") or "", str)]
    if wrong:
        return f"{wrong[0]}: text, got {getattr(row, wrong[0])!r}"
    if not isinstance(getattr(row, "mean_of_items", False), bool):
        return f"mean_of_items: true or false, got {getattr(row, 'mean_of_items')!r}"
    return flat_problem(getattr(row, "degenerate_when", None))


def recorded(rules: Registry, names) -> dict:
    """The part of `rules` a sweep's record keeps: the rows of `names` (the runs' metric
    columns, resolved by the workload's own lookup), its default responses and variant field,
    as plain JSON data, with every name it was given (`names`, those without a row too: a
    reader tells by them whether it holds the rows of every column at hand)."""
    rows = {}
    names = list(dict.fromkeys(list(names) + list(rules.all_default_responses())))
    for name in names:
        m = rules.lookup(name)
        if m is not None:
            rows[name] = {f: (list(v) if isinstance(v, tuple) else v)
                          for f in ROW_FIELDS if (v := getattr(m, f, None)) not in (None, "", False, (), {})}
            rows[name]["name"] = name
    defaults = {k: list(v) for k, v in getattr(rules.metrics, "DEFAULT_RESPONSES", {}).items()}
    return {"variant_field": rules.variant_field, "default_responses": defaults, "metrics": rows,
            "names": sorted(n for n in names if isinstance(n, str)), "declares": list(DECLARATIONS)}


def from_record(data: dict) -> Registry:
    """A Registry from `recorded`'s data (ValueError, one line, where it is not that)."""
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict) or \
            not isinstance(data.get("default_responses", {}), dict) or not isinstance(data.get("variant_field", ""), str):
        raise ValueError("registry: {variant_field, default_responses, metrics} as a sweep's record keeps them")
    rows = {}
    for name, row in data["metrics"].items():
        if not isinstance(row, dict) or set(row) - set(ROW_FIELDS) or row.get("better", "") not in ("higher", "lower", "") \
                or not all(isinstance(row.get(k, ""), str) for k in ("items", "curve", "raised_by", "item_seconds")) \
                or not isinstance(row.get("mean_of_items", False), bool) or flat_problem(row.get("degenerate_when")):
            raise ValueError(f"registry.metrics.{str(name)[:60]}: a metric row ({', '.join(ROW_FIELDS)})")
        try:
            rows[str(name)] = Row(**{**row, "name": str(name), "stages": tuple(row.get("stages") or ())})
        except TypeError as e:
            raise ValueError(f"registry.metrics.{str(name)[:60]}: {e}") from None
    defaults = {str(k): tuple(map(str, v)) for k, v in data.get("default_responses", {}).items()
                if isinstance(v, (list, tuple))}
    declares = data.get("declares", [])  # none listed: a record kept before rows declared any
    if not isinstance(declares, list) or not all(isinstance(d, str) for d in declares):
        raise ValueError("registry.declares: the list of declarations its rows carry")
    return Registry(RecordedMetrics(rows, defaults, tuple(declares)), data.get("variant_field", ""))


def lacks_declarations(rules: Registry) -> list[str]:
    """The declarations (`DECLARATIONS`) a recorded registry's rows could not carry when it was
    kept ([] for one kept since, or a workload's own rules)."""
    declares = getattr(rules.metrics, "declares", DECLARATIONS)
    return [f for f in DECLARATIONS if f not in declares]


def with_declarations(kept: Registry, current: Registry) -> Registry:
    """A recorded registry whose rows predate some declarations, each row given those it
    could not carry from the workload's current row of its name (`current`): how the
    statistics read a sweep recorded before rows said what they needed."""
    missing = lacks_declarations(kept)
    rows = {}
    for m in kept.metrics.REGISTRY:
        now = current.lookup(m.name)
        given = {f: v for f in missing if now is not None and (v := getattr(now, f, None)) not in (None, "", False)}
        rows[m.name] = replace(m, **{f: v for f, v in given.items() if getattr(m, f) in (None, "", False)})
    return Registry(RecordedMetrics(rows, kept.metrics.DEFAULT_RESPONSES), kept.variant_field)


class _NoMetrics:
    """A registry that knows no metric: `UNKNOWN`'s rows."""
    REGISTRY: tuple = ()
    DEFAULT_RESPONSES: dict = {}

    def lookup(self, name: str):
        return None


# the rules where no workload is named (a statistic on bare data): every metric unknown, higher
# better unless a margin's declaration says otherwise, none timed: no workload's defaults
UNKNOWN = Registry(_NoMetrics())
