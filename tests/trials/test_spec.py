import subprocess
import sys

import pytest
import yaml

from trials import spec as specmod
from trials.spec import SpecError, alias_structure, parse, replicate_seed

GOOD = {
    "name": "t",
    "base": {"preset": "tiny"},
    "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
                "D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}}},
    "replicates": 2,
}


def test_full_factorial_cells_replicates_and_blocked_seeds():
    s = parse(GOOD)
    assert len(s.trials) == 8 and len({t.cell for t in s.trials}) == 4
    for r in range(2):
        seeds = {t.seed for t in s.trials if t.replicate == r}
        assert seeds == {replicate_seed("t", r)}  # every cell of a replicate shares its seed
    assert replicate_seed("t", 0) != replicate_seed("t", 1)
    t = next(t for t in s.trials if t.cell == "D1=shifted|D2=block")
    assert t.config.window == "shifted" and t.config.decay_gamma == "block" and t.config.seed == t.seed


def test_fractional_design_and_alias_structure():
    raw = {"name": "frac", "base": {"preset": "tiny"},
           "factors": {"A": {"lo": {"window": "shifted"}, "hi": {"window": "aligned"}},
                       "B": {"lo": {"decay_gamma": 4.0}, "hi": {"decay_gamma": "block"}},
                       "C": {"lo": {"confidence_input": "hidden"}, "hi": {"confidence_input": "hidden+markov"}},
                       "D": {"lo": {"head": "markov"}, "hi": {"head": "rnn"}}},
           "design": {"generators": {"D": "ABC"}}}
    s = parse(raw)
    assert s.design == "2^(4-1)" and len(s.trials) == 8
    code = {"lo": -1, "hi": 1}
    for t in s.trials:
        a, b, c, d = (code[t.levels[f]] for f in "ABCD")
        assert d == a * b * c
    lines = alias_structure(s)
    assert lines[0] == "I = A:B:C:D"
    assert "A = B:C:D" in lines and "A:B = C:D" in lines


BAD = [
    ({**GOOD, "colour": 1}, "spec: unknown key 'colour'"),
    ({**GOOD, "base": {"preset": "tiny", "widnow": "x"}}, "base: unknown trainer config field 'widnow'"),
    ({**GOOD, "factors": {"D1": {"a": {"window": "shifted"}, "b": {"windw": "aligned"}}}},
     "factors.D1.b: unknown trainer config field 'windw'"),
    ({**GOOD, "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "shifted"}}}},
     "factors.D1: levels 'a' and 'b' resolve to the same config"),
    ({**GOOD, "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "diagonal"}}}},
     "cell D1=b: window: unknown level 'diagonal'"),
    ({**GOOD, "factors": {"D1": {"only": {"window": "shifted"}}}}, "factors.D1: needs at least two levels"),
    ({**GOOD, "replicates": 0}, "replicates: must be an integer >= 1"),
    ({**GOOD, "design": {"generators": {"D2": "D1*D7"}}}, "names a factor that does not exist"),
    ({**GOOD, "design": "half"}, "design: 'full' or {generators"),
    ({**GOOD, "name": "has space"}, "name: required"),
    ({**GOOD, "resources": {"tpu": 1}}, "resources: a mapping with cpu and/or gpu"),
]


@pytest.mark.parametrize("raw, message", BAD)
def test_bad_specs_are_refused(raw, message):
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert any(message in p for p in e.value.problems), e.value.problems


def test_every_problem_is_listed_at_once():
    raw = {**GOOD, "colour": 1, "replicates": -1, "base": {"preset": "tiny", "nope": 1}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert len(e.value.problems) == 3


def test_bad_spec_on_the_cli_runs_and_logs_nothing(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**GOOD, "factors": {"D1": {"a": {"window": "x"}, "b": {}}}}))
    r = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(spec), "--storage", str(tmp_path / "st")],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert "trials: error: cell D1=a: window: unknown level 'x'" in r.stderr
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "st").exists()


def test_smoke_shrinks_every_trial():
    s = specmod.smoke(parse(GOOD))
    assert all(t.config.draft_steps <= 10 and t.config.target_steps <= 10 for t in s.trials)
    assert len(s.trials) == 8
