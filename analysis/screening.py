"""The screening study's spec as a confirmation reads it (`screening_spec`): the one given,
else the one `trials run` saved with the sweep, else the shipped one; read as any spec is and
checked to be the spec the screening's runs came from (its name, workload, factors and
levels, and every setting it gives one the runs recorded)."""

from __future__ import annotations

from pathlib import Path

import yaml

from trials.export import SweepFrame
from trials.store.yaml_input import MAX_SPEC_BYTES, YamlRefused, safe_yaml
from trials.workload import DEFAULT as DEFAULT_WORKLOAD

from .anova import AnalysisError


def screening_spec(sweep: SweepFrame, given: str | None) -> tuple[dict, Path]:
    """The screening study's spec: `given`, else the one `trials run` saved with the sweep
    (`<storage>/NAME/spec.yaml`, where this machine sees it), else sweeps/NAME.yaml; read as a
    spec is (no alias bomb, no deep nesting, no key given twice) and checked to be the
    screening's: its name, workload, factors and levels those the runs hold, and every setting
    it gives a level or the base the one the runs recorded. One line where it is not."""
    saved = Path(sweep.record.storage) / sweep.record.experiment / "spec.yaml" if sweep.record.storage else None
    path = (Path(given) if given else saved if saved is not None and saved.is_file()
            else Path("sweeps") / f"{sweep.record.experiment}.yaml")
    try:
        if path.stat().st_size > MAX_SPEC_BYTES:
            raise ValueError(f"{path.stat().st_size} bytes, past a spec's {MAX_SPEC_BYTES}")
        raw = safe_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as e:
        why = str(e).splitlines()[0][:200] if isinstance(e, (YamlRefused, ValueError)) else type(e).__name__
        raise AnalysisError(f"--confirm: cannot read the screening spec {path} ({why}); give it with "
                            "--spec PATH") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("factors"), dict):
        raise AnalysisError(f"--confirm: {path} is not a sweep spec with factors")
    if (why := _not_the_screening(raw, sweep)):
        raise AnalysisError(f"--confirm: {path} is not the spec {sweep.record.experiment} ran: {why}; give that one "
                            "with --spec PATH")
    return raw, path


def _not_the_screening(raw: dict, sweep: SweepFrame) -> str:
    """Why this spec is not the one the screening's runs came from ("" where it may be)."""
    if raw.get("name") != sweep.record.experiment:
        return f"its name is {str(raw.get('name'))[:64]!r}"
    workload = raw.get("workload") or DEFAULT_WORKLOAD
    if sweep.record.workload and workload != sweep.record.workload:
        return f"its workload is {str(workload)[:64]!r}, the runs' {sweep.record.workload!r}"
    factors = raw["factors"]
    if set(factors) != set(sweep.factors):
        return f"its factors are {', '.join(map(str, factors))[:120]}, the runs' {', '.join(sweep.factors)}"
    for f in sweep.factors:
        levels = factors[f]
        if not isinstance(levels, dict) or not all(isinstance(v, (dict, type(None))) for v in levels.values()):
            return f"{f}'s levels are not a mapping of level -> overrides"
        ran = sorted(set(sweep.runs[f].dropna().astype(str)))
        if (missing := [lv for lv in ran if lv not in levels]):
            return f"{f} has no level {missing[0]!r}, which the runs have"
    return _settings_differ(raw, sweep)


def _settings_differ(raw: dict, sweep: SweepFrame) -> str:
    """The first setting the spec gives a level (or its base, where no level or control arm
    sets it) that the runs at it did not record ("" where none): an edited spec is not the one
    they ran."""
    runs, given = sweep.runs, {}
    for f in sweep.factors:
        for level, overrides in raw["factors"][f].items():
            for key, value in (overrides or {}).items():
                given[(f, str(level), key)] = value
    controls = raw.get("controls") if isinstance(raw.get("controls"), dict) else {}
    set_by_level = {key for (_, _, key) in given} | {k for c in controls.values() if isinstance(c, dict) for k in c}
    base = raw.get("base") if isinstance(raw.get("base"), dict) else {}
    given.update({(None, None, k): v for k, v in base.items() if k not in set_by_level})
    for (f, level, key), value in given.items():
        if key not in runs.columns or value is None or (isinstance(value, str) and "/" in value):
            continue  # not a recorded setting, or a path (resolved where it ran)
        rows = runs[key] if f is None else runs.loc[runs[f].astype(str) == level, key]
        if (other := [v for v in rows.dropna().unique() if not _same_setting(v, value)]):
            where = f"{f}={level}" if f is not None else "base"
            return f"{where} sets {key}: {str(value)[:40]}, but its runs recorded {str(other[0])[:40]}"
    return ""


def _same_setting(recorded, given) -> bool:
    try:
        return float(recorded) == float(given)
    except (TypeError, ValueError):
        return str(recorded).strip().lower() == str(given).strip().lower()
