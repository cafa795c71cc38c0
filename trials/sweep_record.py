"""The sweep's record in one place: what a sweep is (`SweepRecord`: its identity, design,
primary responses with their margins, primary terms and named contrasts, a confirmation's
origin, the declared sequential plan with its looks so far, the workload swept and that
workload's registry as data), its checks (`check_record`), and one codec for each medium it
lives in:

- the sweep's MLflow parent run: `to_parent` gives the tags and params `trials run` writes,
  `from_parent` reads them back, checked; the registry rides in a tag (`keep_registry`
  adds the rows of the names a sweep's runs report, with the declarations they carry), so
  that no reader imports a workload (but to give a record kept before its rows declared what
  the statistics read those declarations: `trials.registry.with_declarations`);
- a parquet export's metadata: `to_metadata`, `from_metadata` (checked);
- the declared sequential plan, as both media keep it before any look: `declared_plan`.

The statistics read a record only through here (and `analysis.sequential` reads the plan's
JSON). Plain Python: importing it loads neither MLflow nor pandas, and no workload until a record
without its registry, or with one kept before its rows' declarations, is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from trials.registry import PRIMARY_FORM, Registry, from_record, lacks_declarations, recorded, with_declarations
from trials.store.keys import (BASE_PARAM, CONFIRMS_TAG, CONTRASTS_TAG, DESCRIPTION_TAG, DESIGN_PARAM, FACTORS_PARAM,
                               PLAN_PARAM, PRIMARY_TERMS_TAG, REGISTRY_TAG, REPLICATES_PARAM, RESPONSES_TAG,
                               SEQUENTIAL_TAG, STORAGE_TAG, SUMMARY_TAG, WORKLOAD_TAG, read_split_tag, split_tag)
from trials.store.record import confirms_problem
from trials.workload import DEFAULT as DEFAULT_WORKLOAD
from trials.workload import WorkloadError, load_workload

DESCRIPTION_CHARS = 4000  # what a parent keeps of a spec's description


@dataclass(frozen=True)
class SweepRecord:
    """What a sweep's parent run says about it (or, for `trials run --local`, its spec)."""
    experiment: str = ""
    description: str = ""
    experiment_id: str = ""
    parent_run_id: str = ""
    design: str = ""  # full | 2^(k-p)
    responses: dict = field(default_factory=dict)  # the primary responses and their margins
    sequential: str = ""  # JSON of analysis.sequential.Plan: the declared plan and the looks so far
    declared_plan: str = ""  # that plan as declared when the sweep was made (the parent's write-once param)
    storage: str = ""  # the storage root `trials run` saved the sweep's spec in (the parent's `sweep.storage`)
    timing: str = ""  # JSON: the last timing pass (the parent's `timing` tag), with its `busy` count
    primary_terms: list = field(default_factory=list)  # the spec's family terms ([]: every main effect and control)
    contrasts: dict = field(default_factory=dict)  # the spec's named contrasts: {name: {from: {f: level}, to: {...}}}
    workload: str = DEFAULT_WORKLOAD  # the trainer swept (`trials.workload`): its metric registry
    registry: dict = field(default_factory=dict)  # that registry as data (`trials.registry.recorded`), if kept
    confirms: dict = field(default_factory=dict)  # a confirmation's screening study and estimate (trials.spec)

    @classmethod
    def of_spec(cls, spec, registry: dict | None = None) -> SweepRecord:
        """The record a spec (`trials.spec.SweepSpec`) gives a new sweep: its plan declared, no look yet."""
        plan = declared_plan(spec.sequential) if spec.sequential else ""
        return cls(experiment=spec.name, description=spec.description, design=spec.design,
                   responses=dict(spec.responses), sequential=plan, declared_plan=plan,
                   primary_terms=list(spec.primary_terms), contrasts=dict(spec.contrasts), workload=spec.workload,
                   registry=dict(registry or {}), confirms=dict(spec.confirms))

    def rules(self) -> Registry:
        """The rules over the swept workload's metrics: the record's own copy where it keeps
        one (no workload imported unless its rows predate a declaration: `with_declarations`,
        read as they are where the workload is gone), else the installed or allowed workload's."""
        if not self.registry:
            return load_workload(self.workload).registry  # the one name lookup: installed or allowed only
        kept = from_record(self.registry)
        if not lacks_declarations(kept):
            return kept
        try:  # kept before its rows declared what the statistics read: the workload's current rows say it
            return with_declarations(kept, load_workload(self.workload).registry)
        except WorkloadError:
            return kept

    def timing_summary(self) -> dict:
        """The last timing pass's summary (its settings, response and busy count), {} for none."""
        return _json(self.timing, dict) if self.timing else {}

    def busy_timing(self) -> tuple[str, int] | None:
        """(the timed response, how many of its run-rounds the last timing pass found busy), where
        it found any (`trials.timing.timing_pass.busy_rounds`); None for none, no pass, or a pass before the check."""
        last = self.timing_summary()
        busy = last.get("busy")
        if isinstance(busy, int) and not isinstance(busy, bool) and busy > 0 and isinstance(last.get("response"), str):
            return last["response"], busy
        return None


def declared_plan(sequential: Mapping) -> str:
    """A spec's sequential plan as the record keeps it before any look (`analysis.sequential.Plan`'s JSON)."""
    return json.dumps({"declared": True, **sequential, "looks": []})


# --- the MLflow parent run ---------------------------------------------------------------

def to_parent(record: SweepRecord, factors: Mapping, base: Mapping, replicates: int) -> tuple[dict, dict]:
    """(tags, params) of a new parent run: each field once. The params are write-once in
    MLflow (the design, the factors' levels in the spec's order, the base config, the
    replicates and the declared plan); the tags are what a resume may restate (the primary
    responses, the confirmation) or a look appends to (the sequential record)."""
    tags = {WORKLOAD_TAG: record.workload, **restated(record)}
    if record.primary_terms:
        tags[PRIMARY_TERMS_TAG] = json.dumps(record.primary_terms)
    if record.contrasts:
        tags[CONTRASTS_TAG] = json.dumps(record.contrasts)
    if record.sequential:
        tags[SEQUENTIAL_TAG] = record.sequential
    if record.description:
        tags[DESCRIPTION_TAG] = record.description[:DESCRIPTION_CHARS]
    if record.registry:
        tags.update(split_tag(REGISTRY_TAG, json.dumps(record.registry, sort_keys=True)))
    params = {DESIGN_PARAM: record.design, REPLICATES_PARAM: str(replicates),
              FACTORS_PARAM: json.dumps(dict(factors), default=str)[:6000],
              BASE_PARAM: json.dumps(dict(base), sort_keys=True, default=str)[:6000]}
    if record.declared_plan:
        params[PLAN_PARAM] = record.declared_plan
    return tags, params


def restated(record: SweepRecord) -> dict[str, str]:
    """The parent's tags a resume restates from the spec as it is now (none where empty)."""
    tags = {}
    if record.responses:
        tags[RESPONSES_TAG] = json.dumps(record.responses)
    if record.confirms:
        tags[CONFIRMS_TAG] = json.dumps(record.confirms)
    return tags


def factor_levels(params: Mapping) -> dict[str, list[str]]:
    """Level order per factor, from a parent's `factors` param (the spec's order); {} where none."""
    try:
        factors = json.loads(params.get(FACTORS_PARAM, "{}"))
    except json.JSONDecodeError:
        return {}
    return {f: list(levels) for f, levels in factors.items()} if isinstance(factors, dict) else {}


def from_parent(tags: Mapping, params: Mapping, ids: tuple[str, str, str], factors: list, columns) -> SweepRecord:
    """A parent run's record (`ids`: the experiment's name and id, the parent's run id),
    checked as an export's is (`check_record`, with the runs' `factors` and `columns`):
    ValueError naming the first field that is wrong. A registry kept on the parent is read
    where it covers the runs' metric and item columns (those with a '/') and the primary
    responses; else (or where its tag is damaged) the record names only its workload."""
    experiment, experiment_id, run_id = ids
    responses = _json(tags.get(RESPONSES_TAG, "{}"), dict)
    registry = _kept_registry(tags)
    if not {*(c for c in columns if isinstance(c, str) and "/" in c), *responses} <= set(registry.get("names") or ()):
        registry = {}  # made before the parent kept it, or another writer's names since: the workload's rules
    record = SweepRecord(experiment=experiment, description=tags.get(DESCRIPTION_TAG, ""),
                         experiment_id=experiment_id, parent_run_id=run_id, design=params.get(DESIGN_PARAM, ""),
                         responses=responses,
                         sequential=read_split_tag(dict(tags), SEQUENTIAL_TAG),  # in parts past 5,000
                         declared_plan=params.get(PLAN_PARAM, ""), storage=tags.get(STORAGE_TAG, ""),
                         timing=tags.get(SUMMARY_TAG, ""),
                         primary_terms=[str(t) for t in _json(tags.get(PRIMARY_TERMS_TAG, "[]"), list)],
                         contrasts=_json(tags.get(CONTRASTS_TAG, "{}"), dict),
                         confirms=_json(tags.get(CONFIRMS_TAG, "{}"), dict),
                         workload=parent_workload(tags), registry=registry)
    check_record({"factors": list(factors), **asdict(record)}, columns)
    return record


def parent_workload(tags: Mapping) -> str:
    """The workload a parent's tags name (the default for a parent kept before they named one):
    what `from_parent` reads, for a reader that needs no more of the record (`analysis notebook`)."""
    return tags.get(WORKLOAD_TAG) or DEFAULT_WORKLOAD


def _json(text: str, kind: type):
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return kind()
    return value if isinstance(value, kind) else kind()


def _kept_registry(tags: Mapping) -> dict:
    """The registry a parent keeps, {} for none, or for a tag damaged past reading (it is a
    copy of the workload's rules: a reader falls back to those, a writer writes it anew)."""
    try:
        return _json(read_split_tag(dict(tags), REGISTRY_TAG) or "{}", dict)
    except ValueError:
        return {}


def keep_registry(tags: Mapping, rules: Registry, names) -> dict[str, str]:
    """The parent's registry tag with the rows of `names` (the metric and item names a
    sweep's runs report) added to those it keeps, or {} where it keeps them all already:
    the whole value, which `trials.store.client.set_tags` stores in parts."""
    seen = set(_kept_registry(tags).get("names") or ())
    new = [n for n in names if isinstance(n, str) and n not in seen]
    if not new:
        return {}
    return {REGISTRY_TAG: json.dumps(recorded(rules, sorted(seen | set(new))), sort_keys=True)}


# --- a parquet export's metadata ---------------------------------------------------------

def to_metadata(record: SweepRecord) -> dict:
    """The record as an export's metadata keeps it (plain JSON data, its fields' names)."""
    return asdict(record)


def from_metadata(given: Mapping, columns) -> SweepRecord:
    """`to_metadata`'s inverse, checked (`check_record`); a field it lacks, or holds empty,
    keeps its default."""
    check_record(dict(given), columns)
    blank = SweepRecord()
    return SweepRecord(**{f.name: given.get(f.name) or getattr(blank, f.name) for f in fields(SweepRecord)})


# --- checks --------------------------------------------------------------------------------

TEXT_FIELDS = ("experiment", "description", "experiment_id", "parent_run_id", "design", "sequential", "declared_plan",
               "workload", "timing", "storage")


def _short(value) -> str:
    return repr(value)[:60]


def check_record(given: Mapping, columns) -> None:
    """A recorded sweep's fields (a parquet export's metadata, a parent run's tags) checked as
    a spec's are: ValueError naming the first field that is wrong. The primary responses go
    through the workload's registry (`Registry.primary_response`), the spec's own check. Its
    sequential plan is the statistics' to read (`analysis.sweep_reader.check_plan`)."""
    factors = given.get("factors", [])
    if not isinstance(factors, list) or not all(isinstance(f, str) for f in factors):
        raise ValueError(f"factors: a list of column names, got {_short(factors)}")
    missing = [f for f in factors if f not in columns]
    if missing:
        raise ValueError(f"factor column(s) {', '.join(missing)} missing")
    for key in TEXT_FIELDS:
        if not isinstance(given.get(key) or "", str):
            raise ValueError(f"{key}: text, got {_short(given[key])}")
    terms = given.get("primary_terms") or []
    if not isinstance(terms, list) or not all(isinstance(t, str) for t in terms):
        raise ValueError(f"primary_terms: a list of term names, got {_short(terms)}")
    check_contrasts(given.get("contrasts") or {}, factors)
    if given.get("confirms") and (problem := confirms_problem(given["confirms"])):
        raise ValueError(problem)
    responses = given.get("responses") or {}
    if not isinstance(responses, dict):
        raise ValueError(f"responses: must map metric names to {PRIMARY_FORM}, got {_short(responses)}")
    try:
        rules = SweepRecord(workload=given.get("workload") or DEFAULT_WORKLOAD,
                            registry=given.get("registry") or {}).rules()
    except WorkloadError as e:
        raise ValueError(str(e)) from None
    for name, decl in responses.items():
        problem = rules.primary_response(name, decl, f"responses.{name}")[1]
        if problem:
            raise ValueError(problem)


def check_contrasts(contrasts, factors: list[str]) -> None:
    """A recorded sweep's named contrasts: each {from: {factor: level}, to: {...}} over the
    same factors of the sweep; ValueError naming the first that is not."""
    if not isinstance(contrasts, dict):
        raise ValueError(f"contrasts: a mapping of names to {{from: {{...}}, to: {{...}}}}, got {_short(contrasts)}")
    for name, decl in contrasts.items():
        ok = isinstance(decl, dict) and set(decl) == {"from", "to"} and all(
            isinstance(decl[k], dict) and decl[k] and all(isinstance(v, str) for v in decl[k].values())
            for k in ("from", "to"))
        if not ok or set(decl["from"]) != set(decl["to"]):
            raise ValueError(f"contrasts.{str(name)[:60]}: {{from: {{FACTOR: LEVEL}}, to: {{FACTOR: LEVEL}}}} over "
                             f"the same factors, got {_short(decl)}")
        unknown = sorted(set(decl["from"]) - set(factors))
        if unknown:
            raise ValueError(f"contrasts.{str(name)[:60]}: {unknown[0][:60]!r} is not a factor of the sweep")
