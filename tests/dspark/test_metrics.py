"""The metric registry: one row per metric, and the Responses table (docs/responses.md) agrees with it."""

from pathlib import Path

import pytest

from dspark import metrics
from dspark.metrics import REGISTRY, Metric, lookup
from trials.registry import Registry

RULES = Registry(metrics)  # the engine's rules over DSpark's rows
better, degenerate_reason, unmeasured_reason = RULES.better, RULES.degenerate_reason, RULES.unmeasured_reason

README = Path(__file__).resolve().parents[2] / "docs" / "responses.md"


def _readme_rows():
    text = README.read_text()
    start = text.index("| metric | better | unit | stages | ranks arms in | meaning |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    return rows


def test_the_readme_table_is_the_registry():
    rows = _readme_rows()
    assert list(rows) == [m.name for m in REGISTRY]
    for m in REGISTRY:
        name, direction, unit, stages, ranks, meaning = rows[m.name]
        assert direction == (m.better or "-") and unit == m.unit
        assert stages == ", ".join(m.stages)
        ranking = [s for s in m.stages if unmeasured_reason(s, m.name) is None]
        assert ranks == (", ".join(ranking) or "-"), m.name
        assert meaning.startswith(m.meaning) and meaning.endswith("(headline)") == m.headline


def test_names_find_their_rows():
    assert lookup("tf/accept@3").name == "tf/accept@k"
    assert lookup("sched/accepted@0.5").name == "sched/accepted@t"
    assert lookup("conf/ece_mean_sts").name == "conf/ece_mean"
    assert lookup("conf/ece@2_sts").name == "conf/ece@k"
    assert lookup("nope/x") is None
    assert lookup("jack/sched/alg1_throughput@R64@n").name == "jack/<response>@n"
    assert lookup("jack/spec/tau@g3").name == "jack/<response>@g"
    assert better("val/bpb") == "lower" and better("spec/tau") == "higher" and better("train/step_ms") == "lower"
    assert degenerate_reason("backbone", "tf/tau") and degenerate_reason("drafter", "tf/tau") is None
    assert "constant" in unmeasured_reason("drafter", "val/bpb")
    assert "not measured" in unmeasured_reason("backbone", "spec/speedup")
    assert metrics.HEADLINE == ("val/bpb", "tf/tau", "spec/tau")


def test_every_name_the_trainer_reports_has_a_row():
    """The names the trainer and evaluators write (read from the committed studies' runs)."""
    import pandas as pd

    root = README.parents[1] / "results"
    names = set()
    for path in root.glob("*/runs.parquet"):
        names |= {c for c in pd.read_parquet(path).columns if "/" in c}
    assert names, "no committed runs to read"
    missing = sorted(n for n in names if lookup(n) is None and not n.startswith("trial/"))
    assert not missing, missing


def test_a_row_validates_itself():
    with pytest.raises(ValueError, match="better"):
        Metric("x/y", "up", "", ("drafter",), "")
    with pytest.raises(ValueError, match="stages"):
        Metric("x/y", "higher", "", ("target",), "")


def test_dspark_hands_its_own_groups_over_in_a_form_the_engine_encodes():
    """The workload hands its items over as `report(..., items=)` takes them, each response
    recomputed without each group of its own grouping (item i in group i mod G, G = min(items,
    16)); the engine keeps every group, so a reader takes G from the record."""
    from trials.store import items

    assert [metrics.jack_groups(n) for n in (0, 1, 2, 15, 16, 17, 400)] == [0, 1, 2, 15, 16, 16, 16]
    given = {"conf/ece_mean": metrics.jackknifed(20, [0.1 * g for g in range(metrics.jack_groups(20))])}
    cols = items.encode(given, {})
    assert cols["jack/conf/ece_mean@g15"] == pytest.approx(1.5) and cols["jack/conf/ece_mean@n"] == 20
    assert len(items.document(cols)["jackknife"]["conf/ece_mean"]) == 16
    assert not hasattr(metrics, "jack_name") and not hasattr(metrics, "JACK_PREFIX")  # the names live in the engine
    assert RULES.headline("drafter") == ("tf/tau", "spec/tau") and RULES.timed() == metrics.TIMED

