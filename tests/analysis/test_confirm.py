"""`analysis plan NAME --confirm TERM` (analysis.confirm): from the committed screening study
seed-questions, a two-arm spec that `trials validate` accepts, sized at its measured noise."""

import math
from pathlib import Path

import pytest
import yaml

from analysis.anova import AnalysisError
from analysis.cli import main
from analysis.confirm import blocks_for, confirm, paired_noise
from analysis.load import read_parquet
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
    assert f"run it: trials run {out} && trials augment seed-questions-confirm-operating-point --until-decided" in said
    spec = validate.load(out)  # what `trials validate` accepts
    assert spec.name == "seed-questions-confirm-operating-point" and list(spec.factors) == ["operating_point"]
    assert list(spec.factors["operating_point"]) == ["K4-decay4", "K7-decay7"]
    raw = yaml.safe_load(out.read_text())
    assert raw["factors"]["operating_point"]["K7-decay7"] == {"block_size": 7, "decay_gamma": 7.0}
    assert raw["base"]["head"] == "rnn" and raw["base"]["window"] == "aligned"  # --at, and the last level by default
    assert raw["responses"] == {"val/bpb": {"better": "lower", "margin": 0.01}}
    assert "seed-questions" in raw["description"] and "undecided" in raw["description"]
    # blocks: the fewest that decide it at the paired noise, the plan a quarter more, its first look half of that
    sweep, d = screening
    v = next(x for x in d.of("val/bpb") if x.term == "operating_point")
    v_pair, v_it = paired_noise(v, d.checks["val/bpb"].sigma, 2.0 / 4)
    b = blocks_for(v, v_pair, v_it, 0.05, 0.8)
    assert b is not None and blocks_for(v, v_pair, v_it, 0.05, 0.8) == b
    from analysis.power import p_decided
    assert p_decided(v.estimate, math.sqrt(v_pair / (b - 1) + v_it), b - 2, 0.05, v.margin) < 0.8
    assert raw["sequential"] == {"max_replicates": math.ceil(1.25 * b), "alpha": 0.05}
    assert raw["replicates"] == max(4, math.ceil(math.ceil(1.25 * b) / 2)) and spec.replicates == raw["replicates"]
    # a paired block is two runs: its sd sits near twice a run's variance plus the seeds' favour
    assert 2 * d.checks["val/bpb"].sigma ** 2 <= v_pair


def test_a_factor_is_confirmed_by_its_two_levels_and_bad_asks_are_one_line(screening, tmp_path):
    sweep, d = screening
    said = confirm(sweep, d, "head", "val/bpb", spec=str(SPEC), out=str(tmp_path / "h.yaml"))
    assert "arms: head = rnn vs markov" in said
    assert list(validate.load(tmp_path / "h.yaml").factors["head"]) == ["rnn", "markov"]
    for term, at, match in (("nosuch", {}, "no such term"), ("head", {"D9": "nosuch"}, "--at D9=nosuch"),
                            ("head", {"head": "rnn"}, "--at head: not a factor held fixed")):
        with pytest.raises(AnalysisError, match=match) as e:
            confirm(sweep, d, term, "val/bpb", at, spec=str(SPEC), out=str(tmp_path / "x.yaml"))
        assert "\n" not in str(e.value)
    with pytest.raises(AnalysisError, match="cannot read the screening spec"):
        confirm(sweep, d, "head", "val/bpb", spec=str(tmp_path / "none.yaml"), out=str(tmp_path / "y.yaml"))
