"""`analysis plan NAME --confirm TERM` (analysis.confirm): from the committed screening study
seed-questions, a two-arm spec that `trials validate` accepts, sized at its measured noise."""

import math
import re
from pathlib import Path

import pytest
import yaml

from analysis.anova import AnalysisError
from analysis.cli import main
from analysis.confirm import _price, blocks_for, confirm, paired_noise
from analysis.sweep_reader import read_parquet
from analysis.report import build_report
from trials import validate

ROOT = Path(__file__).resolve().parents[2]
PARQUET = ROOT / "results" / "seed-questions" / "runs.parquet"
SPEC = ROOT / "sweeps" / "seed-questions.yaml"


@pytest.fixture(scope="module")
def screening():
    sweep = read_parquet(PARQUET)
    return sweep, build_report(sweep, None).decision


def test_the_operating_point_is_confirmed_by_two_arms_sized_at_the_measured_noise(screening, tmp_path, capsys):
    out = tmp_path / "op.yaml"
    assert main(["plan", "seed-questions", "--parquet", str(PARQUET), "--confirm", "operating_point", "--response",
                 "val/bpb", "--spec", str(SPEC), "--out-spec", str(out), "--at", "head=rnn"]) == 0
    said = capsys.readouterr().out
    # two primary responses in the screening: the name says which this one confirms
    name = "seed-questions-confirm-operating-point-val-bpb"
    assert f"run it: trials run {out} && trials augment {name} --until-decided" in said
    spec = validate.load_spec(out)  # what `trials validate` accepts
    assert spec.name == name and list(spec.factors) == ["operating_point"]
    assert out.read_text().startswith("# written by `analysis plan seed-questions --confirm operating_point --at "
                                      "head=rnn --response val/bpb` from ")
    assert list(spec.factors["operating_point"]) == ["K4-decay4", "K7-decay7"]
    raw = yaml.safe_load(out.read_text())
    assert raw["factors"]["operating_point"]["K7-decay7"] == {"block_size": 7, "decay_gamma": 7.0}
    assert raw["base"]["head"] == "rnn" and raw["base"]["window"] == "aligned"  # --at, and the last level by default
    assert raw["responses"] == {"val/bpb": {"better": "lower", "margin": 0.01}}
    assert "seed-questions" in raw["description"] and "undecided" in raw["description"]
    # blocks: the fewest that decide it at the paired noise, the plan a quarter more, its first look half of that
    sweep, d = screening
    v = next(x for x in d.of("val/bpb") if x.term == "operating_point")
    assert f"the plan looks at {max(4, math.ceil(math.ceil(1.25 * blocks_for(v, *paired_noise(v, d.checks['val/bpb'].sigma, 0.5), 0.05, 0.8)) / 2))}" in said
    v_pair, v_it = paired_noise(v, d.checks["val/bpb"].sigma, 2.0 / 4)
    b = blocks_for(v, v_pair, v_it, 0.05, 0.8)
    assert b is not None and blocks_for(v, v_pair, v_it, 0.05, 0.8) == b
    from analysis.power import p_decided
    assert p_decided(v.estimate, math.sqrt(v_pair / (b - 1) + v_it), b - 2, 0.05, v.margin) < 0.8
    most, first = math.ceil(1.25 * b), max(4, math.ceil(math.ceil(1.25 * b) / 2))
    # two looks: the first at `first` blocks, the second at the plan's maximum
    assert raw["sequential"] == {"max_replicates": most, "alpha": 0.05, "look_every": most - first}
    assert raw["replicates"] == first and spec.replicates == raw["replicates"]
    assert spec.sequential["look_every"] == most - first
    # the link to the screening study: what it estimated, kept in the spec the sweep records
    assert spec.confirms == {"study": "seed-questions", "term": "operating_point", "response": "val/bpb",
                             "estimate": pytest.approx(v.estimate), "low": pytest.approx(v.interval()[0]),
                             "high": pytest.approx(v.interval()[1]), "verdict": v.verdict}
    # one pricing rule with `analysis plan`: the term's own error, never floored to the pooled sigma's 2 sigma^2
    # (the operating point's own error is below it: paired sd 0.0265, 57 blocks, where the floor priced 104)
    own = v.noise.blocks * (v.noise.seeds + v.noise.item_run) * 2 / 0.5
    assert v_pair == pytest.approx(own) and v_pair < 2 * d.checks["val/bpb"].sigma ** 2
    assert math.sqrt(v_pair) == pytest.approx(0.0265, abs=5e-4) and b == 57
    # and nothing it writes replaces a file: the same command again keeps the spec it wrote (its text
    # the same: a rerun of `make demo`), another question is refused
    before = out.read_text()
    capsys.readouterr()
    assert main(["plan", "seed-questions", "--parquet", str(PARQUET), "--confirm", "operating_point", "--response",
                 "val/bpb", "--spec", str(SPEC), "--out-spec", str(out), "--at", "head=rnn"]) == 0
    assert f"{out} (written before, unchanged)" in capsys.readouterr().out and out.read_text() == before
    assert main(["plan", "seed-questions", "--parquet", str(PARQUET), "--confirm", "operating_point", "--response",
                 "val/bpb", "--spec", str(SPEC), "--out-spec", str(out), "--at", "head=markov"]) == 2
    assert f"{out} exists; nothing is overwritten: name another file with --out-spec PATH" in capsys.readouterr().err
    assert out.read_text() == before
    for bad in ("2", "nan", "0", "-1"):  # every value a user gives to plan, checked before any work
        assert main(["plan", "seed-questions", "--parquet", str(PARQUET), "--confirm", "D2", "--spec", str(SPEC),
                     "--out-spec", str(tmp_path / f"p{bad}.yaml"), "--power", bad]) == 2
        assert "--power: a probability in (0, 1)" in capsys.readouterr().err and not (tmp_path / f"p{bad}.yaml").exists()


def test_a_factor_is_confirmed_by_its_two_levels_and_bad_asks_are_one_line(screening, tmp_path):
    sweep, d = screening
    said = confirm(sweep, d, "head", "val/bpb", spec=str(SPEC), out=str(tmp_path / "h.yaml"))
    assert "arms: head = rnn vs markov" in said
    assert list(validate.load_spec(tmp_path / "h.yaml").factors["head"]) == ["rnn", "markov"]
    for term, at, match in (("nosuch", {}, "no such term"), ("head", {"D9": "nosuch"}, "--at D9=nosuch"),
                            ("head", {"head": "rnn"}, "--at head: not a factor held fixed")):
        with pytest.raises(AnalysisError, match=match) as e:
            confirm(sweep, d, term, "val/bpb", at, spec=str(SPEC), out=str(tmp_path / "x.yaml"))
        assert "\n" not in str(e.value)
    with pytest.raises(AnalysisError, match="cannot read the screening spec"):
        confirm(sweep, d, "head", "val/bpb", spec=str(tmp_path / "none.yaml"), out=str(tmp_path / "y.yaml"))


def test_a_confirmation_names_its_screening_study_and_the_screening_report_lists_it(tmp_path, capsys):
    """The link both ways, through the store the trials write and the parquet exports
    `analysis results` reads: the confirmation's report names what it confirms and the
    estimate it started from; the screening study's report lists the confirmation with its
    verdict."""
    import numpy as np

    from analysis import links
    from analysis.sweep_reader import load_runs
    from trials.export import to_parquet
    from tests.analysis.conftest import synthetic_sweep
    from trials.tracking import open_ledger
    from trials.validate import parse

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic_sweep(uri, name="screen", failed=0)
    link = {"study": "screen", "term": "D2", "response": "spec/tau", "estimate": 0.01, "low": -0.05, "high": 0.07,
            "verdict": "undecided"}
    spec = parse({"name": "screen-confirm-d2", "base": {"preset": "tiny"}, "replicates": 6,
                  "factors": {"D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}}},
                  "responses": {"spec/tau": {"better": "higher", "margin": 0.2}}, "confirms": link})
    ledger, rng = open_ledger(uri, spec), np.random.default_rng(1)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {"target_hash": "0" * 16})
        ledger.log_metrics(run_id, {"spec/tau": 3.0 + 0.01 * t.replicate + rng.normal(0, 0.01)}, step=1)
        ledger.finish(run_id, "FINISHED", None)
    ledger.finish(ledger.parent_id, "FINISHED")
    conf = load_runs("screen-confirm-d2", uri)
    assert conf.record.confirms == link
    from analysis.rendering.words import confirms_line

    assert (confirms_line(conf.record) == "confirms D2 on spec/tau of the screening study screen, which "
            "estimated it +0.01 [-0.05, +0.07] (undecided there)")
    assert main(["report", "screen-confirm-d2", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--no-log"]) == 0
    said = capsys.readouterr().out
    assert confirms_line(conf.record) in said and "its claim's family: this one question" in said
    assert main(["report", "screen", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--no-log"]) == 0
    said = capsys.readouterr().out
    line = next(x for x in said.splitlines() if "confirmation screen-confirm-d2" in x)
    assert "D2 on spec/tau negligible" in line and "at 6 blocks" in line, said
    assert "confirmation screen-confirm-d2: D2 on spec/tau negligible" in (tmp_path / "r" / "screen" / "report.md").read_text()
    # the committed studies' way: parquet exports side by side in results/
    for name in ("screen", "screen-confirm-d2"):
        (tmp_path / "res" / name).mkdir(parents=True)
        to_parquet(load_runs(name, uri), tmp_path / "res" / name / "runs.parquet")
    kept = read_parquet(tmp_path / "res" / "screen-confirm-d2" / "runs.parquet")
    assert kept.record.confirms == link
    found = links.in_folders(tmp_path / "res" / "screen", "screen")
    assert [s.record.experiment for s in found] == ["screen-confirm-d2"]
    assert links.confirmation_lines(found)[0] == line.strip()
    assert links.in_folders(tmp_path / "res" / "screen", "other") == []


def test_a_confirms_record_that_is_not_one_is_refused_in_one_line():
    from trials.spec import SpecError
    from trials.validate import parse

    base = {"name": "c", "base": {"preset": "tiny"}, "replicates": 4,
            "factors": {"D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}}},
            "responses": {"spec/tau": {"better": "higher", "margin": 0.2}}}
    good = {"study": "s", "term": "D2", "response": "spec/tau", "estimate": 0.1, "low": 0.0, "high": 0.2,
            "verdict": "undecided"}
    assert parse({**base, "confirms": good}).confirms == good
    for bad, said in [({**good, "estimate": "big"}, "confirms.estimate: a number"),
                      ({**good, "study": ""}, "confirms.study: text"),
                      ({k: v for k, v in good.items() if k != "low"}, "confirms: {study: S"),
                      ("seed-questions", "confirms: {study: S")]:
        with pytest.raises(SpecError, match=re.escape(said)):
            parse({**base, "confirms": bad})


def test_decided_is_not_said_of_a_term_whose_size_is_unsure(capsys):
    """'every primary term is decided' beside a term that matters with its size unsure read as
    if nothing were open: the planner and augment's stop line say how many are unsure."""
    from analysis.until_decided import stop_reason

    assert main(["plan", "seed-questions", "--parquet", str(PARQUET)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert ("train/step_ms (primary): every primary term is decided (1 matters with its size unsure: whether beyond "
            "the margin is open)") in said, said
    assert stop_reason(0, 4, 6, None, 0.0, None, unsure=2) == (
        "stop: every term of the family is decided (2 of them matter with their size unsure: whether beyond the "
        "margin is still open)")
    assert stop_reason(0, 4, 6, None, 0.0, None) == "stop: every term of the family is decided"


def test_a_confirmation_name_stays_within_what_trials_run_accepts():
    from analysis.confirm import MAX_NAME, confirmation_name
    from trials.spec import NAME_RE

    long = "s" * 62
    a, b = confirmation_name(long, "D1", "val/bpb"), confirmation_name(long, "D1", "train/step_ms")
    assert len(a) <= MAX_NAME and len(b) <= MAX_NAME and a != b
    assert NAME_RE.match(a) and NAME_RE.match(b)
    assert confirmation_name("seed", "D1[shifted->aligned]") == "seed-confirm-d1-shifted-aligned"


def test_next_is_the_open_question_the_fewest_blocks_decide(screening, tmp_path, capsys):
    sweep, d = screening
    raw = yaml.safe_load(SPEC.read_text())
    # every open primary term of step time priced on its own; `next` is the one the fewest blocks decide
    open_ = [v for v in d.of("train/step_ms") if v.verdict == "undecided" and v.in_family]
    assert open_ == []  # the screening decided every step-time term: nothing to confirm, nothing written
    said = confirm(sweep, d, "next", "train/step_ms", spec=str(SPEC), out=str(tmp_path / "none.yaml"))
    assert "no open question to confirm on train/step_ms" in said and not (tmp_path / "none.yaml").exists()
    priced = {v.term: _price(sweep, d, raw, v, {}, 0.05, 0.8).blocks
              for v in d.of("val/bpb") if v.verdict == "undecided" and v.in_family}
    assert len(priced) >= 5 and len(set(priced.values())) > 1  # a choice to make
    cheapest = min(priced, key=lambda t: priced[t])
    out = tmp_path / "next.yaml"
    said = confirm(sweep, d, "next", "val/bpb", spec=str(SPEC), out=str(out))
    assert said.startswith(f"seed-questions: the open question the cheapest study decides: {cheapest} on val/bpb")
    assert f"blocks: {priced[cheapest]} in one look" in said
    assert yaml.safe_load(out.read_text().split("\n", 1)[1])["confirms"]["term"] == cheapest


def test_the_aux_head_against_pure_ce_is_confirmed_by_the_control_against_one_cell(screening, tmp_path):
    sweep, d = screening
    out = tmp_path / "ctl.yaml"
    said = confirm(sweep, d, "vs control=pure_ce", "train/step_ms", at={"head": "rnn"}, spec=str(SPEC), out=str(out))
    raw = yaml.safe_load(out.read_text())
    # the control's overrides against the cell the other factors fix (head as given, the rest at their last level)
    assert raw["factors"] == {"pure_ce": {"control": {"aux_weight": 0.0}, "cell": {}}}
    assert raw["base"]["head"] == "rnn" and raw["base"]["window"] == "aligned"
    assert raw["base"]["confidence_input"] == "hidden+markov" and raw["base"]["aux_weight"] == 0.1
    assert raw["confirms"]["term"] == "vs control=pure_ce" and raw["responses"]["train/step_ms"]["better"] == "lower"
    assert out.read_text().startswith("# written by `analysis plan seed-questions --confirm 'vs control=pure_ce' "
                                      "--at head=rnn --response train/step_ms`")
    assert "arms: pure_ce = control vs cell" in said
    assert validate.load_spec(out).factors["pure_ce"]  # a spec `trials validate` accepts
    # priced on the control contrast's own paired error: a block's contrast is the 16 arms' mean
    # minus one control run, so sum(w^2) = 1 + 1/16
    v = next(x for x in d.of("train/step_ms") if x.term == "vs control=pure_ce")
    v_pair, v_it = paired_noise(v, d.checks["train/step_ms"].sigma, 1 + 1 / 16)
    assert f"blocks: {blocks_for(v, v_pair, v_it, 0.05, 0.8)} in one look" in said
    with pytest.raises(AnalysisError, match="vs control=aux0: no such term"):
        confirm(sweep, d, "vs control=aux0", "train/step_ms", spec=str(SPEC), out=str(tmp_path / "x.yaml"))


def test_the_screening_spec_is_read_as_a_spec_and_must_be_the_one_the_runs_came_from(screening, tmp_path):
    """Another study's spec, another workload, a factor renamed, a level the runs have missing,
    a key given twice or YAML nested 1,000 deep: one line each naming the file, nothing written
    (they once trained the edited arms, wrote a tiny study that 'confirms seed-questions', or
    raised a RecursionError of thousands of lines)."""
    sweep, d = screening
    raw = yaml.safe_load(SPEC.read_text())
    other = {**raw, "name": "head-and-block"}
    renamed = {**raw, "factors": {("window" if k == "D1" else k): v for k, v in raw["factors"].items()}}
    no_level = {**raw, "factors": {**raw["factors"], "head": {"markov": raw["factors"]["head"]["markov"]}}}
    edited = {**raw, "factors": {**raw["factors"], "head": {**raw["factors"]["head"],
                                                           "markov": {"head": "rnn", "d_model": 999}}}}
    rebased = {**raw, "base": {**raw["base"], "target_steps": 40}}
    cases = {"other": (yaml.safe_dump(other), "its name is 'head-and-block'"),
             "workload": (yaml.safe_dump({**raw, "workload": "mlp"}), "its workload is 'mlp'"),
             "renamed": (yaml.safe_dump(renamed), "its factors are"),
             "level": (yaml.safe_dump(no_level), "head has no level 'rnn'"),
             "edited": (yaml.safe_dump(edited), "head=markov sets d_model: 999, but its runs recorded 128"),
             "rebased": (yaml.safe_dump(rebased), "base sets target_steps: 40, but its runs recorded 400"),
             "twice": (SPEC.read_text() + "\nname: seed-questions\n", "given twice"),
             "deep": ("a: " + "[" * 1000 + "]" * 1000 + "\n", "nests deeper than")}
    for name, (text, match) in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        out = tmp_path / f"out-{name}.yaml"
        with pytest.raises(AnalysisError, match=re.escape(match)) as e:
            confirm(sweep, d, "head", "val/bpb", spec=str(path), out=str(out))
        assert "\n" not in str(e.value) and str(path) in str(e.value) and not out.exists()


def test_the_spec_saved_with_the_sweep_is_read_before_the_one_in_sweeps(screening, tmp_path, monkeypatch):
    """Where the sweep's storage is seen, `trials run`'s saved spec is the screening's, not a
    sweeps/NAME.yaml edited since (the runs' record of each setting checks either)."""
    sweep, d = screening
    saved = tmp_path / "st" / "seed-questions" / "spec.yaml"
    saved.parent.mkdir(parents=True)
    saved.write_text(SPEC.read_text())
    monkeypatch.chdir(tmp_path)  # no sweeps/seed-questions.yaml here: found only in storage
    import dataclasses
    stored = dataclasses.replace(sweep, record=dataclasses.replace(sweep.record, storage=str(tmp_path / "st")))
    out = tmp_path / "c.yaml"
    confirm(stored, d, "head", "val/bpb", out=str(out))
    assert f"from {saved} and the screening study's noise" in out.read_text().splitlines()[0]
    with pytest.raises(AnalysisError, match="cannot read the screening spec sweeps/seed-questions.yaml"):
        confirm(sweep, d, "head", "val/bpb", out=str(tmp_path / "d.yaml"))


def test_a_damaged_confirmation_is_a_line_in_its_screening_report_not_a_refusal(tmp_path):
    """One confirmation whose record is damaged, another whose `confirms` tag is malformed: the
    screening's links say so, one line each, and its report still builds (a damaged one once
    made the screening's own report refuse; a malformed tag dropped the link silently)."""
    import json as _json

    from analysis import links
    from analysis.sweep_reader import load_runs
    from tests.analysis.conftest import synthetic_sweep
    from trials.store.client import tracking_client
    from trials.store.keys import CONFIRMS_TAG, SEQUENTIAL_TAG, sweep_parent

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for name in ("screen", "conf-damaged", "conf-garbled"):
        synthetic_sweep(uri, name=name, replicates=2, failed=0)
    client = tracking_client(uri)

    def parent(name):
        return sweep_parent(client, client.get_experiment_by_name(name).experiment_id).info.run_id

    claim = {"study": "screen", "term": "D1", "response": "spec/tau", "estimate": 1.0, "low": 0.5, "high": 1.5,
             "verdict": "undecided"}
    client.set_tag(parent("conf-damaged"), CONFIRMS_TAG, _json.dumps(claim))
    client.set_tag(parent("conf-damaged"), SEQUENTIAL_TAG, '{"declared": true, "looks": [')
    client.set_tag(parent("conf-garbled"), CONFIRMS_TAG, '{"study": "screen", "term": ')
    lines = links.confirmation_lines(links.in_store(uri, "screen"))
    assert len(lines) == 2, lines
    assert lines[0].startswith("confirmation conf-garbled: its confirms record is malformed")
    assert lines[1].startswith("confirmation conf-damaged: cannot be read (") and "sequential" in lines[1]
    assert build_report(load_runs("screen", uri), None, links=lines).decision is not None
