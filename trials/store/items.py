"""A run's items: the per-item records of an evaluation (held-out batches, prompts), from
which the statistics split a response's noise into the seeds' part and the items' part
(`analysis.variance`). A workload hands them to the engine with its report,

    report(metrics, items={"val/loss": per_item_values})                  # a mean of its items
    report(metrics, items={"val/ece": {"items": 8, "without": [...]}})   # recomputed per group

and the store keeps them as one JSON artifact per run (`items.json`), not as metrics.

For a response that is the mean of its items the engine groups them (item i in group i mod G,
G = min(items, JACK_GROUPS)) and forms each group's leave-out value (the mean of the other
groups' items); a response that is no mean (a calibration error, a ratio of sums) comes
recomputed by the workload without each of the groups it chose, G values (`without`, 2 <= G
<= items; null where a group's removal leaves it undefined). The document keeps every
group's value, so that a reader takes G from it: the grouping is the workload's own.

Between the trial and the store (and in the statistics' frame and the parquet export) they
travel as flat columns, the names old stores and exports hold as metrics, so that those
read unchanged: `jack/<response>@g<k>` (the response without group k),
`jack/<response>@n` (its item count), `split/<response>@g<k>` (a group's own value, runs
recorded before the jackknife) and `split/<name>` (what the evaluation counted, such as
its prompts). `document` folds those columns into the artifact, `columns` unfolds it.
Plain Python: no MLflow.
"""

from __future__ import annotations

import math

SPLIT_PREFIX = "split/"
JACK_PREFIX = "jack/"
JACK_GROUPS = 16  # an evaluation's items (prompts, batches) in at most this many jackknife groups
ITEMS_FILE = "items.json"  # the artifact, at the run's root
ITEMS_TAG = "trials.items"  # on a run whose artifact exists: its format
FORMAT = "trials-items/1"
SECTIONS = {"jackknife": JACK_PREFIX, "groups": SPLIT_PREFIX}  # per-group values, by prefix


def split_name(response: str, group: int) -> str:
    """The column holding a response's value on one evaluation group."""
    return f"{SPLIT_PREFIX}{response}@g{group}"


def jack_name(response: str, group: int) -> str:
    """The column holding a response recomputed without evaluation group `group`."""
    return f"{JACK_PREFIX}{response}@g{group}"


def count_name(response: str) -> str:
    """The column holding how many items a response's jackknife was formed from."""
    return f"{JACK_PREFIX}{response}@n"


def jack_groups(items: int) -> int:
    """How many groups the engine forms of `items` per-item values (item i in group i mod G)."""
    return max(0, min(int(items), JACK_GROUPS))


def is_item_column(name: str) -> bool:
    return name.startswith((JACK_PREFIX, SPLIT_PREFIX))


def _number(response: str, v) -> float:
    try:
        got = v.item() if callable(getattr(v, "item", None)) else v  # a numpy number, a 0-d tensor
    except (ValueError, RuntimeError, TypeError):
        got = v
    if isinstance(got, bool) or not isinstance(got, (int, float)):
        raise ValueError(f"items of {response!r}: {str(v)[:40]!r} is not a number")
    return float(got)


def encode(items: dict, metrics: dict) -> dict[str, float]:
    """The columns of a report's `items` ({response: per-item values, or {"items": n,
    "without": G values}}); ValueError, naming the response, where they cannot be (fewer than
    2 items, a 'without' of fewer than 2 or more than items values, a mean that is not the response's
    reported value)."""
    if not isinstance(items, dict):
        raise ValueError(f"items: a dict of response -> values, not {type(items).__name__}")
    out: dict[str, float] = {}
    for response, given in items.items():
        if isinstance(given, dict):
            n, without = given.get("items"), list(given.get("without") or [])
            if isinstance(n, bool) or not isinstance(n, int) or not 2 <= len(without) <= n:
                raise ValueError(f"items of {response!r}: 'items' must be an integer >= 2 with between 2 and items "
                                 f"values in 'without', got items={n!r} and {len(without)} values")
            without = [math.nan if v is None else _number(response, v) for v in without]
        else:
            values = [_number(response, v) for v in given]
            n, G = len(values), jack_groups(len(values))
            if n < 2:
                raise ValueError(f"items of {response!r}: {n} value(s); a jackknife needs at least 2")
            full = sum(values) / n
            if response in metrics and not math.isclose(float(metrics[response]), full, rel_tol=1e-5, abs_tol=1e-9):
                raise ValueError(f"items of {response!r} average {full:.6g}, but its reported value is "
                                 f"{float(metrics[response]):.6g}: give per-item values whose mean is the "
                                 "response, or {'items': n, 'without': [...]}")
            without = [_leave_out_mean(values, G, g) for g in range(G)]
        out.update({jack_name(response, g): v for g, v in enumerate(without)})
        out[count_name(response)] = float(n)
    return out


def encode_each(by_key: dict) -> dict[str, dict[str, float]]:
    """{run key: its items} -> {run key: their columns} (a timing pass's, `TimingHooks.items`)."""
    if not isinstance(by_key, dict):
        raise ValueError(f"items by run: a dict of run key -> items, not {type(by_key).__name__}")
    return {key: encode(items, {}) for key, items in by_key.items()}


def _leave_out_mean(values: list[float], G: int, g: int) -> float:
    kept = [v for i, v in enumerate(values) if i % G != g]
    return sum(kept) / len(kept)


def _parse(name: str) -> tuple[str, str, int | None] | None:
    """A column -> (section, response or counted name, group or None for a count)."""
    for section, prefix in (*SECTIONS.items(), ("evaluation", SPLIT_PREFIX)):
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        head, at, tail = rest.rpartition("@")
        if at and tail.startswith("g") and tail[1:].isdigit():
            return section, head, int(tail[1:])
        if at and tail == "n" and prefix == JACK_PREFIX:
            return "items", head, None
        if prefix == SPLIT_PREFIX and section == "evaluation":
            return "evaluation", rest, None
    return None


def document(columns: dict, into: dict | None = None, run: str = "", values: dict | None = None) -> dict:
    """The artifact of `columns` (item columns only), merged into an earlier one (`into`): a
    response's groups replace its earlier ones as a whole (a re-evaluation on fewer items
    leaves none of the old behind). A value that is not finite is kept as null (not measured).
    `run` and `values` (each response's value logged with its items) bind it to its run: a
    reader checks them against the run it reads it from (`trials.store.reader.run_items`)."""
    doc = {"format": FORMAT, "jackknife": {}, "groups": {}, "items": {}, "evaluation": {}, "values": {}}
    for section in ("jackknife", "groups", "items", "evaluation", "values"):
        doc[section].update((into or {}).get(section) or {})
    for r in responses_of(columns):  # new items: the value the old ones were logged with no longer applies
        doc["values"].pop(r, None)
    doc["values"].update({r: float(v) for r, v in (values or {}).items()
                          if isinstance(v, (int, float)) and math.isfinite(float(v))})
    if run or (into or {}).get("run"):
        doc["run"] = run or into["run"]
    fresh: dict[tuple[str, str], dict[int, float | None]] = {}
    for name, v in columns.items():
        parsed = _parse(name)
        if parsed is None:
            raise ValueError(f"{name!r} is not an item column")
        section, key, group = parsed
        value = float(v) if isinstance(v, (int, float)) and math.isfinite(float(v)) else None
        if group is None:
            doc[section][key] = value
        else:
            fresh.setdefault((section, key), {})[group] = value
    for (section, key), by_group in fresh.items():
        doc[section][key] = [by_group.get(g) for g in range(max(by_group) + 1)]
    return doc


def responses_of(columns: dict) -> set[str]:
    """The responses whose items these item columns carry."""
    return {key for name in columns if (p := _parse(name)) is not None and p[0] in ("jackknife", "items")
            for key in [p[1]]}


def columns(doc: dict) -> dict[str, float]:
    """The flat columns of an artifact (`document`'s inverse): a group's null (its removal left
    the response undefined, as AUROC without both outcomes) is NaN, so that every group has its
    column; other nulls are left out. ValueError, naming the response, where it is not one: a
    value that is not a finite number (text such as "1e308", NaN, inf), an item count that is
    not an integer >= 2, or a response with more jackknife groups than items."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document (format {str(doc.get('format') if isinstance(doc, dict) else doc)[:40]!r})")
    out: dict[str, float] = {}
    try:
        for section, prefix in SECTIONS.items():
            for response, values in (doc.get(section) or {}).items():
                out.update({f"{prefix}{response}@g{g}": math.nan if v is None else _stored(response, v)
                            for g, v in enumerate(values)})
        counts = {r: _stored(r, n) for r, n in (doc.get("items") or {}).items() if n is not None}
        out.update({count_name(r): n for r, n in counts.items()})
        out.update({f"{SPLIT_PREFIX}{k}": _stored(k, v) for k, v in (doc.get("evaluation") or {}).items()
                    if v is not None})
    except (TypeError, AttributeError) as e:
        raise ValueError(f"{FORMAT} document: {type(e).__name__}: {str(e)[:80]}") from None
    for response, n in counts.items():
        if n != int(n) or n < 2:
            raise ValueError(f"items of {response!r}: a count of {n:g}, not an integer >= 2")
        groups = (doc.get("jackknife") or {}).get(response)
        if groups is not None and len(groups) > n:
            raise ValueError(f"items of {response!r}: {len(groups)} jackknife groups for {int(n)} items "
                             "(at most one group per item)")
    return out


def _stored(response: str, v) -> float:
    """A stored item value: a finite JSON number (never text, a flag or NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise ValueError(f"items of {response!r}: {str(v)[:40]!r} is not a finite number")
    return float(v)
