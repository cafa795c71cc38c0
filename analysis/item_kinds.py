"""Which evaluation a response's items are drawn on, and the run's column that counts them:
the decoded prompts, the held-out batches, or the prompts of the timing pass. A workload's
registry row says it (`Registry.item_count`); a registry recorded before rows declared it is
read by the names' prefixes, as those sweeps were analysed. Plain Python: the readers
(`analysis.sweep_reader`) check a run's item counts with it before any statistics load.
"""

from __future__ import annotations

from trials.registry import UNKNOWN, Registry

COUNTS = {"prompts": "split/prompts", "eval_batches": "split/eval_batches", "timing_prompts": "timing/prompts"}
KINDS = {column: kind for kind, column in COUNTS.items()}
WHAT = {"prompts": "prompts", "eval_batches": "held-out batches", "timing_prompts": "prompts of the timing pass"}
DECODED = ("spec/", "conf/", "sched/")  # before rows declared it: the decoded prompts' responses


def kind_of(response: str, rules: Registry | None = None) -> str:
    """What a re-evaluation adds to a response: prompts, held-out batches, or (a timed
    response of the timing pass) the prompts the pass decodes."""
    rules = rules or UNKNOWN
    declared = rules.item_count(response)
    if declared in KINDS:
        return KINDS[declared]
    if rules.is_timed(response):
        return "timing_prompts"
    return "prompts" if response.startswith(DECODED) else "eval_batches"


def count_column(response: str, rules: Registry | None = None) -> str:
    """The run's column counting the items a response is drawn on ("" for a metric the
    registry does not know: nothing says which)."""
    rules = rules or UNKNOWN
    if rules.item_count(response):
        return rules.item_count(response)
    return COUNTS[kind_of(response, rules)] if rules.lookup(response) is not None else ""
