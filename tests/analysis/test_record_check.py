"""A sweep's sequential record is checked before it is believed (issue 61): a forged or moved
decision, a look that names other blocks, alpha raised, looks added past what a plan records,
and a plan other than the one declared are named in one line and not used. On a committed
confirmation (9 blocks, looks at 5 and 9, D2 on spec/tau decided at look 2)."""

import dataclasses
import json
from pathlib import Path

import pytest

from analysis.boundaries import spent
from analysis.record_check import checked
from analysis.report import build_report
from analysis.sweep_reader import read_parquet
from trials.export import to_parquet

STUDY = Path(__file__).resolve().parents[2] / "results" / "paper-drafter-confirm-d2-spec-tau" / "runs.parquet"
KEY = "spec/tau|D2"


@pytest.fixture(scope="module")
def study():
    return read_parquet(STUDY)


def _with(sweep, record: dict, declared: str = ""):
    return dataclasses.replace(sweep, record=dataclasses.replace(sweep.record, sequential=json.dumps(record),
                                                                 declared_plan=declared))


def _unchecked(sweep):
    return build_report(sweep, None, check=False)


def test_a_true_record_passes_unchanged(study):
    same, lines = checked(study, _unchecked)
    assert lines == [] and same is study
    assert json.loads(study.record.sequential)["looks"][1]["decided"][KEY]["verdict"] == "matters, size unsure"


def test_a_forged_decision_is_named_and_not_used(study):
    d = json.loads(study.record.sequential)
    real = d["looks"][1]["decided"][KEY]
    d["looks"][0]["decided"] = {KEY: {**real, "verdict": "matters, beyond the margin", "estimate": 55,
                                      "ci_low": 43, "ci_high": 67}}
    rep = build_report(_with(study, d), None, unrecorded="a test")
    named = [x for x in rep.summary.splitlines() if x.startswith("look 1's recorded decisions are not used")]
    assert named and "+55 [+43, +67]" in named[0], rep.summary[-800:]
    assert rep.look.distrusted == named  # beside the look, on the first screen of the HTML and the MLflow note
    # not used: the term is decided at look 2 from its runs, as recorded there, not at the forged look 1
    v = next(v for v in rep.decision.verdicts if v.response == "spec/tau" and v.term == "D2")
    assert v.verdict == "matters, size unsure" and v.estimate == pytest.approx(real["estimate"])
    assert v.decided_at == 2
    assert rep.look.plan.looks[0].decided == {} and rep.look.plan.looks[0].note.startswith("not used:")


def test_a_decision_moved_to_other_data_is_named(study):
    d = json.loads(study.record.sequential)
    d["looks"][0]["decided"] = d["looks"][1]["decided"]  # look 2's true decision, claimed at look 1's 5 blocks
    _, lines = checked(_with(study, d), _unchecked)
    assert len(lines) == 1 and "which its runs do not decide" in lines[0] and "\n" not in lines[0]
    d = json.loads(study.record.sequential)
    d["looks"][0]["blocks"], d["looks"][0]["data"] = 7, "f" * 16  # data no count of blocks gives
    _, lines = checked(_with(study, d), _unchecked)
    assert lines[0].startswith("look 1 does not match its runs (its first 7 block(s) give data ") and \
        "it recorded no decision" in lines[0]
    # look 2's decisions were made after look 1 as it was: made again after this look 1, they differ
    assert len(lines) == 2 and lines[1].startswith("look 2's recorded decisions are not used: spec/tau|D2")


@pytest.mark.parametrize("look", [0, 1])
def test_a_look_that_names_another_count_of_blocks_is_read_at_the_count_its_data_give(study, look):
    """A look's block count set to 1 (the helper's probe: it once made the current look
    "too few blocks" and moved a look's alpha to the next) is named in one line and read at
    the count its data fingerprint gives: the verdicts are the true record's."""
    d = json.loads(study.record.sequential)
    true = d["looks"][look]["blocks"]
    d["looks"][look]["blocks"] = 1
    rep = build_report(_with(study, d), None, unrecorded="a test")
    said = f"look {look + 1} records 1 replicate block(s), but its data fingerprint is that of the first {true}: read at {true}"
    assert said in rep.summary.splitlines()
    honest = build_report(study, None, unrecorded="a test")
    assert [(v.verdict, v.estimate, v.ci_low, v.ci_high) for v in rep.decision.verdicts] == \
        [(v.verdict, v.estimate, v.ci_low, v.ci_high) for v in honest.decision.verdicts]
    assert rep.look.plan.looks[look].blocks == true


def test_decisions_of_a_look_whose_runs_were_evaluated_again_stand(study):
    """More prompts since the look: the values it saw are gone, so its decisions cannot be made
    again; the record is kept as it is."""
    d = json.loads(study.record.sequential)
    d["looks"][1]["evaluation"]["prompts"] = 16.0  # it saw fewer prompts than the runs hold now
    d["looks"][1]["data"] = "0" * 16
    sweep = _with(study, d)
    same, lines = checked(sweep, _unchecked)
    assert lines == [] and json.loads(same.record.sequential)["looks"][1]["decided"][KEY]


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(alpha=0.2), "look 1: alpha 0.0337043, but the plan's spending gives"),
    # alpha 0.9 with every look spent as 0.9 spends: no plan may hold it (its intervals would be empty)
    (lambda d: [d.update(alpha=0.9)] + [lk.update(alpha=spent(lk["t"], 0.9) - spent(d["looks"][i - 1]["t"], 0.9)
                                         if i else spent(lk["t"], 0.9)) for i, lk in enumerate(d["looks"])],
     "alpha: must lie in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got 0.9"),
    (lambda d: d["looks"][1].update(alpha=0.05), "look 2: alpha 0.05, but the plan's spending gives"),
    (lambda d: d["looks"][1].update(blocks=12), "look 2: 12 blocks, past the plan's maximum of 9"),
    (lambda d: d["looks"][1].update(t=0.3, alpha=0.0), "look 2: information 0.3, less than look 1's 0.56"),
])
def test_a_plan_that_does_not_spend_as_its_rule_is_refused_in_one_line(study, tmp_path, edit, words):
    d = json.loads(study.record.sequential)
    edit(d)
    to_parquet(_with(study, d), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="the sequential record is malformed") as e:
        read_parquet(tmp_path / "x.parquet")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_thousand_crafted_looks_are_refused_before_any_work(study, tmp_path):
    d = json.loads(study.record.sequential)
    look = d["looks"][0]
    d["looks"] = []
    for k in range(1000):  # spent exactly as the rule spends, a thousandth of the information each
        t0, t1 = k / 1000, (k + 1) / 1000
        d["looks"].append({**look, "t": t1, "alpha": spent(t1, 0.05) - spent(t0, 0.05), "decided": {}})
    to_parquet(_with(study, d), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="1000 looks, more than a plan of 9 blocks records"):
        read_parquet(tmp_path / "x.parquet")  # as it is read, before any look's boundaries are computed


def test_a_record_other_than_the_declared_plan_is_refused(study, tmp_path):
    d = json.loads(study.record.sequential)
    declared = json.dumps({**{k: v for k, v in d.items() if k != "looks"}, "looks": []})
    to_parquet(_with(study, d, declared), tmp_path / "same.parquet")
    assert read_parquet(tmp_path / "same.parquet").record.declared_plan == declared
    d["max_replicates"] = 20
    to_parquet(_with(study, d, declared), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="not the plan declared when the sweep was made .its max_replicates is 20, "
                                         "the declared plan's 9"):
        read_parquet(tmp_path / "x.parquet")


def test_a_sequential_record_removed_is_read_as_the_plan_declared_with_the_sweep(study, tmp_path):
    """The parent's plan tag (or an export's `sequential`) removed from a sweep that declared a
    plan: it is not read as a fixed-sample study at alpha 0.05 (the probe's finding), but as
    its declared plan, which no look has spent yet."""
    d = json.loads(study.record.sequential)
    declared = json.dumps({**d, "looks": []})
    gone = dataclasses.replace(study, record=dataclasses.replace(study.record, sequential="", declared_plan=declared))
    to_parquet(gone, tmp_path / "x.parquet")
    back = read_parquet(tmp_path / "x.parquet")
    assert json.loads(back.record.sequential)["looks"] == [] and json.loads(back.record.sequential)["max_replicates"] == \
        d["max_replicates"]
    rep = build_report(back, None, unrecorded="a test")
    assert "fixed-sample" not in rep.summary and f"of a plan of at most {d['max_replicates']} blocks" in rep.summary
