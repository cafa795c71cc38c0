"""Which evaluation a response's items are drawn on (its kind), and the run's column that
counts them: an evaluation's own count `split/<kind>` (DSpark's decoded prompts, its held-out
batches, a user's examples), or the prompts of the timing pass (`timing/prompts`, kind
`timing_prompts`). A workload's registry row declares it
(`Registry.item_count`); nothing here reads a metric's name (a record kept before rows
declared it is read with the workload's current rows: `trials.registry.with_declarations`).
No statistics: the readers (`analysis.sweep_reader`) check a run's item counts with it before
any model is fitted.
"""

from __future__ import annotations

from trials.registry import UNKNOWN, Registry
from trials.store.items import SPLIT_PREFIX, count_name

from .sequential import EVALUATION_COLUMNS, fingerprint

TIMING_COUNT = ("timing_prompts", "timing/prompts")  # (kind, column): the timing pass's prompts
# a kind's words where its name is not them (a user's `split/examples`: "examples")
WHAT = {"eval_batches": "held-out batches", "timing_prompts": "prompts of the timing pass"}


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
    """A kind's items in words ("held-out batches", "examples"; "items" for a response's own)."""
    return WHAT.get(kind, kind.replace("_", " ")) or "items"


def kind_of(response: str, rules: Registry | None = None) -> str:
    """What a re-evaluation adds to a response: the kind its row's count counts, or (a timed
    response of the timing pass) the prompts the pass decodes; "" where its row declares
    neither (its items are its own: `jack/<r>@n`)."""
    rules = rules or UNKNOWN
    kind = column_kind(rules.item_count(response))
    if kind:
        return kind
    return TIMING_COUNT[0] if rules.is_timed(response) else ""


def count_column(response: str, rules: Registry | None = None) -> str:
    """The run's column counting the evaluation items a response is drawn on, as its row
    declares it (the timing pass's prompts for a timed one; "" where it declares none)."""
    rules = rules or UNKNOWN
    return rules.item_count(response) or (TIMING_COUNT[1] if rules.is_timed(response) else "")


def count_in(data, response: str, rules: Registry | None = None) -> str:
    """The column of these runs counting a response's items: the evaluation count its row
    declares, else the response's own `jack/<r>@n` (a workload's own items)."""
    column = count_column(response, rules)
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


def seconds_column(kind: str, rules: Registry | None = None) -> str:
    """The run's column of the seconds one item of a kind costs (its count's row's
    `item_seconds`; "" where it declares none)."""
    return (rules or UNKNOWN).item_seconds(kind_column(kind)) if kind else ""


def more_items_command(kind: str, name: str, rules: Registry | None = None) -> str:
    """The `trials` command (after `trials`, before its count) that adds items of a kind: the
    timing pass's prompts, or a re-evaluation raising the count's field (its row's
    `raised_by`); "" where no row names one."""
    if kind == TIMING_COUNT[0]:
        return f"time {name} --prompts"
    field = (rules or UNKNOWN).raised_by(kind_column(kind)) if kind else ""
    return f"reeval {name} --{field.replace('_', '-')}" if field else ""  # "": no row says what raises it
