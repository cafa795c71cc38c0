"""Which evaluation a response's items are drawn on (its kind), and the run's column that
counts them: an evaluation's own count `split/<kind>` (DSpark's decoded prompts, its held-out
batches, a user's examples), or the prompts of the timing pass (`timing/prompts`, kind
`timing_prompts`); and the curves a report plots. A workload's registry row says it
(`Registry.item_count`); a registry recorded before rows declared it is read by the names'
prefixes, as those sweeps were analysed. No statistics: the readers (`analysis.sweep_reader`)
check a run's item counts with it before any model is fitted.
"""

from __future__ import annotations

from trials.registry import UNKNOWN, Registry, at_filled
from trials.store.items import SPLIT_PREFIX, count_name

from .sequential import EVALUATION_COLUMNS, fingerprint

TIMING_COUNT = ("timing_prompts", "timing/prompts")  # (kind, column): the timing pass's prompts
# a kind's words where its name is not them (a user's `split/examples`: "examples")
WHAT = {"eval_batches": "held-out batches", "timing_prompts": "prompts of the timing pass"}
DECODED = ("spec/", "conf/", "sched/")  # before rows declared it: the decoded prompts' responses
# before the jackknife: the responses whose runs kept each prompt group's own value (`split/`),
# a mean's, so that the group values are its pseudo-values
GROUP_MEANS = ("spec/tau",)
# before rows declared `degenerate_when`: the one response that had it (`Registry.flat_rule`)
FLAT = {"sched/alg1_throughput@R": {"flag": "sched/alg1_fixed@{at}", "same": "sched/alg1_len@{at}",
                                    "why": "degenerate on this capacity curve: Algorithm 1 verifies {same} token(s) "
                                           "for every request of every run at {at}, so it ranks tau, not the "
                                           "scheduler"}}


# before rows declared `raised_by`: the config fields DSpark's re-evaluation raised each count with
RAISED_BY = {"split/prompts": "spec_prompts", "split/eval_batches": "eval_batches"}
# before rows declared `item_seconds`: the one count a plan priced, and its seconds per item
ITEM_SECONDS = {"split/prompts": "split/decode_s_per_prompt"}
# before rows declared `curve`: the one family the report plotted
CURVES = {"spec/accept@": "per-slot acceptance"}


def kind_column(kind: str) -> str:
    """The run's column counting the items of a kind."""
    return TIMING_COUNT[1] if kind == TIMING_COUNT[0] else SPLIT_PREFIX + kind


def column_kind(column: str) -> str:
    """The kind a count column counts ("" where it is none: not `split/<kind>` or the timing pass's)."""
    if column == TIMING_COUNT[1]:
        return TIMING_COUNT[0]
    kind = column[len(SPLIT_PREFIX):] if column.startswith(SPLIT_PREFIX) else ""
    return kind if kind and "@" not in kind and "/" not in kind else ""


def what(kind: str) -> str:
    """A kind's items in words ("held-out batches", "examples")."""
    return WHAT.get(kind, kind.replace("_", " "))


def kind_of(response: str, rules: Registry | None = None) -> str:
    """What a re-evaluation adds to a response: the kind its row's count counts, or (a timed
    response of the timing pass) the prompts the pass decodes; for a row that declares no
    count, prompts or held-out batches by its name, as those sweeps were analysed."""
    rules = rules or UNKNOWN
    kind = column_kind(rules.item_count(response))
    if kind:
        return kind
    if rules.is_timed(response):
        return TIMING_COUNT[0]
    return "prompts" if response.startswith(DECODED) else "eval_batches"


def count_column(response: str, rules: Registry | None = None) -> str:
    """The run's column counting the items a response is drawn on ("" for a metric the
    registry does not know: nothing says which)."""
    rules = rules or UNKNOWN
    if rules.item_count(response):
        return rules.item_count(response)
    return kind_column(kind_of(response, rules)) if rules.lookup(response) is not None else ""


def count_in(data, response: str, rules: Registry | None = None) -> str:
    """The column of these runs counting a response's items: the evaluation count its row
    declares (the names' kind where it declares none), else the response's own `jack/<r>@n`
    (a workload's own items)."""
    column = count_column(response, rules) or kind_column(kind_of(response, rules))
    return column if column in data.columns else count_name(response)


def evaluation_counts(columns, rules: Registry | None = None) -> dict[str, str]:
    """{kind: column} of the evaluation counts among these columns that rows declare beyond
    the engine's own (`sequential.EVALUATION_COLUMNS`): a look's fingerprint and evaluation
    hold them too, so that more of a workload's own items is new data, and information."""
    rules, known = rules or UNKNOWN, set(EVALUATION_COLUMNS.values())
    present = {c for c in columns if isinstance(c, str)}
    declared = {rules.item_count(c) for c in present if "/" in c}
    return {column_kind(c): c for c in sorted(declared) if c in present and c not in known and column_kind(c)}


def data_seen(runs, rules: Registry | None = None) -> tuple[str, int, dict]:
    """`sequential.fingerprint` of these runs with the counts their rows declare: the one
    identity of the data a look saw, for recording a look and for checking one."""
    return fingerprint(runs, evaluation_counts(runs.columns, rules))


def flat_rule(response: str, rules: Registry | None = None) -> dict | None:
    """A response's `degenerate_when`, {at} filled in (`Registry.flat_rule`); for a row recorded
    before rows declared it, the rule it was analysed with."""
    rules = rules or UNKNOWN
    rule = rules.flat_rule(response)
    family, _, at = response.partition("@")
    if rule is not None or not at or rules.lookup(response) is None:
        return rule
    legacy = FLAT.get(f"{family}@{at[:1]}")
    return at_filled(legacy, response) if legacy is not None else None


def curves(columns, rules: Registry | None = None) -> dict[str, list[str]]:
    """The curves a report plots (`Registry.curves`); for a registry recorded before rows
    declared them, the one the report plotted then."""
    rules = rules or UNKNOWN
    declared = rules.curves(columns)
    if declared or any(getattr(m, "curve", "") for m in getattr(rules.metrics, "REGISTRY", ())):
        return declared
    legacy = {}
    for prefix, title in CURVES.items():
        cols = [c for c in columns if isinstance(c, str) and c.startswith(prefix) and c[len(prefix):].isdigit()]
        if cols:
            legacy[title] = sorted(cols, key=lambda c: int(c[len(prefix):]))
    return legacy


def seconds_column(kind: str, rules: Registry | None = None) -> str:
    """The run's column of the seconds one item of a kind costs (its count's row's
    `item_seconds`; for a registry recorded before rows declared it, the one priced then)."""
    count = kind_column(kind)
    return (rules or UNKNOWN).item_seconds(count) or ITEM_SECONDS.get(count, "")


def more_items_command(kind: str, name: str, rules: Registry | None = None) -> str:
    """The `trials` command (after `trials`, before its count) that adds items of a kind: the
    timing pass's prompts, or a re-evaluation raising the count's field (its row's `raised_by`;
    for a registry recorded before rows declared it, the field it was then); "" where no row
    names one."""
    if kind == TIMING_COUNT[0]:
        return f"time {name} --prompts"
    count = kind_column(kind)
    field = (rules or UNKNOWN).raised_by(count) or RAISED_BY.get(count, "")
    return f"reeval {name} --{field.replace('_', '-')}" if field else ""  # "": no row says what raises it
