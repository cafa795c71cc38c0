import subprocess
import sys

import pytest
import yaml

from trials import expand, spec as specmod, validate
from trials.fraction import alias_structure
from trials.spec import SpecError, replicate_seed
from trials.validate import parse

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
     "factors.D1: levels 'a' and 'b' train the same objective"),
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
    s = expand.smoke(parse(GOOD))
    assert all(t.config.draft_steps <= 10 and t.config.target_steps <= 10 for t in s.trials)
    assert len(s.trials) == 8


def test_a_dead_factor_is_refused_on_its_resolved_values():
    """At K = 4 the paper's coupling `block` gives the seed's decay 4.0: one objective."""
    raw = {"name": "dead", "base": {"preset": "tiny", "block_size": 4},
           "factors": {"D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}},
                       "D9": {"hidden": {"confidence_input": "hidden"},
                              "markov": {"confidence_input": "hidden+markov"}}}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert e.value.problems == ["factors.D2: levels 'const4' and 'block' train the same objective where "
                                "D9=hidden (their resolved configs are equal); the factor is dead"]
    # at K = 7 the same levels differ, and the spec is valid
    parse({**raw, "base": {"preset": "tiny", "block_size": 7}})
    # a knob that the stage ignores makes no difference either: aux_weight in the drafter stage
    with pytest.raises(SpecError, match="factors.aux: levels 'a' and 'b' train the same objective"):
        parse({"name": "aux", "base": {"preset": "tiny", "parallel_stage": "drafter"},
               "factors": {"aux": {"a": {"aux_weight": 0.1}, "b": {"aux_weight": 0.3}}}})


def test_factors_that_write_the_same_key_are_refused():
    raw = {**GOOD, "factors": {"D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}},
                               "K": {"k4": {"block_size": 4, "decay_gamma": 4.0}, "k7": {"block_size": 7}}}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert e.value.problems == ["factors.D2 and factors.K: both set decay_gamma; a config key may be varied "
                                "by one factor only"]


def test_run_order_is_a_seeded_permutation_inside_each_replicate_block():
    s = parse({**GOOD, "replicates": 3})
    orders = [t.run_order for t in s.trials]
    assert orders == list(range(12))  # trials are listed in launch order, 0-based
    for r in range(3):  # one block per replicate, each launched whole before the next
        block = [t for t in s.trials if t.replicate == r]
        assert {t.run_order for t in block} == set(range(4 * r, 4 * r + 4))
    standard = [f"D1={a}|D2={b}" for a in ("shifted", "aligned") for b in ("const4", "block")]
    launched = [[t.cell for t in s.trials if t.replicate == r] for r in range(3)]
    assert any(cells != standard for cells in launched)  # randomised, not the standard order
    assert len({tuple(c) for c in launched}) > 1  # each block has its own permutation
    again = parse({**GOOD, "replicates": 3})
    assert [t.key for t in again.trials] == [t.key for t in s.trials]  # seeded: reproducible
    other = parse({**GOOD, "name": "u", "replicates": 3})
    assert [t.cell for t in other.trials] != [t.cell for t in s.trials]  # the seed is the sweep's


def test_run_names_are_short_unique_and_show_the_cell():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "sweeps").glob("*.yaml")):
        s = validate.load_spec(path)
        names = [t.run_name for t in s.trials]
        assert len(set(names)) == len(names), path.name
        assert all(len(n) <= 48 for n in names), path.name
    t = next(t for t in parse(GOOD).trials if t.cell == "D1=aligned|D2=block" and t.replicate == 1)
    assert t.run_name == "aligned·block r1"


def test_relative_sqlite_uris_are_made_absolute(tmp_path, monkeypatch):
    from trials.store.client import absolute_uri

    monkeypatch.chdir(tmp_path)
    assert absolute_uri("sqlite:///mlflow.db") == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert absolute_uri("sqlite:////abs/m.db") == "sqlite:////abs/m.db"
    assert absolute_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_validation_lists_the_problems_of_every_stage():
    """A spec-level problem does not hide the problems of the cells' configs."""
    raw = {**GOOD, "colour": 1, "factors": {"D1": {"a": {"window": "shifted"}, "b": {"window": "diagonal"}},
                                            "D2": GOOD["factors"]["D2"]}}
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert any(p.startswith("spec: unknown key 'colour'") for p in e.value.problems)
    assert any("cell D1=b|D2=const4: window: unknown level 'diagonal'" in p for p in e.value.problems)


def _with_responses(responses, **base):
    return {**GOOD, "base": {**GOOD["base"], **base}, "responses": responses}


@pytest.mark.parametrize("responses,base,message", [
    ({"spec/tau": {"better": "higher"}}, {}, "responses.spec/tau.margin: required"),
    ({"spec/tau": {"margin": 0}}, {}, "responses.spec/tau.margin: must be a finite number > 0 or a percentage of the reference mean such as '10%', got 0"),
    ({"spec/tau": {"margin": -0.1}}, {}, "must be a finite number > 0"),
    ({"spec/tau": {"margin": float("nan")}}, {}, "must be a finite number > 0"),
    ({"spec/tau": {"margin": float("inf")}}, {}, "must be a finite number > 0"),
    ({"spec/tau": {"margin": True}}, {}, "must be a finite number > 0"),
    ({"spec/tau": {"margin": "0.1"}}, {}, "must be a finite number > 0"),
    ({"spec/tau": {"better": "lower", "margin": 0.1}}, {}, "responses.spec/tau.better: higher is better for spec/tau"),
    ({"spec/tau": {"better": "up", "margin": 0.1}}, {}, "'higher' or 'lower'"),
    ({"spec/tau": {"margin": 0.1, "alpha": 0.1}}, {}, "must be {better: higher|lower, margin: NUMBER or PERCENT such as 10%}"),
    ({"spec/taus": {"margin": 0.1}}, {}, "responses.spec/taus: not a metric the trainer reports"),
    ({"spec/tau": 0.1}, {}, "must be {better"),
    (["spec/tau"], {}, "responses: must map metric names"),
    ({"spec/tau": {"margin": 0.1}}, {"parallel_stage": "backbone"}, "not measured in the backbone stage"),
    ({"tf/tau": {"margin": 0.1}}, {"parallel_stage": "backbone"}, "degenerate in the backbone stage"),
    ({"val/bpb": {"margin": 0.01}}, {"parallel_stage": "drafter"}, "constant in the drafter stage"),
    ({"spec/tau": {"margin": 0.1}}, {"spec_prompts": 0}, "spec_prompts is 0"),
])
def test_primary_responses_need_a_usable_margin_and_a_measurable_metric(responses, base, message):
    with pytest.raises(SpecError) as e:
        parse(_with_responses(responses, **base))
    assert message in str(e.value), str(e.value)
    assert all(line.startswith("responses") for line in e.value.problems), e.value.problems


def test_primary_responses_are_parsed_with_the_registry_direction():
    s = parse(_with_responses({"spec/tau": {"margin": 0.1}, "conf/ece_mean": {"better": "lower", "margin": 0.01}}))
    assert s.responses == {"spec/tau": {"better": "higher", "margin": 0.1},
                           "conf/ece_mean": {"better": "lower", "margin": 0.01}}
    b = parse(_with_responses({"val/bpb": {"margin": 0.01}, "train/step_ms": {"margin": 12}},
                              parallel_stage="backbone"))
    assert b.responses["train/step_ms"] == {"better": "lower", "margin": 12.0}


@pytest.mark.parametrize("extra,message", [
    ({"sequential": {"max_replicates": 1}}, "sequential.max_replicates: at least 2 and at least the sweep's"),
    ({"sequential": {"alpha": 0.05}}, "sequential: {max_replicates: N,"),
    ({"sequential": {"max_replicates": 6, "alpha": 1.5}}, "sequential.alpha: a number in (0, 0.5) (at 0.5 or more an interval at 1 - 2 alpha is empty), got 1.5"),
    ({"sequential": {"max_replicates": 6, "looks": 3}}, "sequential: {max_replicates: N,"),
    ({"sequential": {"max_replicates": 6, "max_prompts": 1}}, "sequential.max_prompts: 1 is fewer than the "
                                                              "trials' spec_prompts"),
    ({"sequential": {"max_replicates": True}}, "sequential.max_replicates: an integer >= 1, got True"),
    ({"sequential": {"max_replicates": 6, "block_errors": "sometimes"}}, "sequential.block_errors: 'own'"),
    ({"primary_terms": ["D1", "D7"]}, "primary_terms: 'D7' is neither a factor"),
    ({"primary_terms": ["D1", "D1"]}, "primary_terms: a term is named twice"),
    ({"primary_terms": ["D1:D1"]}, "primary_terms: 'D1:D1' is neither"),
    ({"primary_terms": "D1"}, "primary_terms: a non-empty list"),
])
def test_the_family_and_the_sequential_plan_are_validated(extra, message):
    with pytest.raises(SpecError) as e:
        parse({**_with_responses({"spec/tau": {"margin": 0.1}}), **extra})
    assert any(message in p for p in e.value.problems), e.value.problems


def test_a_declared_plan_and_family_are_recorded_on_the_parent_before_any_look(tmp_path):
    import json

    from mlflow.tracking import MlflowClient

    from trials.tracking import open_ledger

    diagonal = {"from": {"D1": "shifted", "D2": "const4"}, "to": {"D1": "aligned", "D2": "block"}}
    s = parse({**_with_responses({"spec/tau": {"margin": 0.1}}), "primary_terms": ["D2", "D1"],
               "sequential": {"max_replicates": 4, "max_prompts": 64}, "contrasts": {"diagonal": diagonal}})
    assert s.primary_terms == ["D2", "D1"] and s.sequential == {"max_replicates": 4, "max_prompts": 64, "alpha": 0.05}
    assert expand.with_replicates(s, 3).sequential == s.sequential  # augment keeps the plan
    no_plan = parse(_with_responses({"spec/tau": {"margin": 0.1}}))
    with pytest.raises(SpecError, match="a plan needs primary responses"):
        parse({**GOOD, "sequential": {"max_replicates": 4}})
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    ledger = open_ledger(uri, s)
    tags = MlflowClient(uri).get_run(ledger.parent_id).data.tags
    plan = json.loads(tags["sequential"])
    assert plan == {"declared": True, "max_replicates": 4, "max_prompts": 64, "alpha": 0.05, "looks": []}
    assert json.loads(tags["primary_terms"]) == ["D2", "D1"]
    assert json.loads(tags["contrasts"]) == {"diagonal": diagonal}
    from analysis.sequential import Plan

    assert Plan.from_json(tags["sequential"]).declared and not no_plan.sequential


# ---- identity and validation limits (hostile specs that once passed validate) ----

THREE = {"A": {"lo": {"window": "shifted"}, "hi": {"window": "aligned"}},
         "B": {"lo": {"decay_gamma": 4.0}, "hi": {"decay_gamma": "block"}},
         "C": {"lo": {"confidence_input": "hidden"}, "hi": {"confidence_input": "hidden+markov"}},
         "D": {"lo": {"head": "markov"}, "hi": {"head": "rnn"}}}


@pytest.mark.parametrize("raw, message", [
    # levels holding the key's separators: two design rows would share one trial key
    ({**GOOD, "factors": {"A": {"x|B=y": {"window": "shifted"}, "y|B=z": {"window": "aligned"}},
                          "B": {"y": {"decay_gamma": 4.0}, "z": {"decay_gamma": "block"}}}},
     "factors.A.x|B=y: a level name must be letters, digits"),
    # a factor named `control` beside a control arm `x`: its cell would be the control's
    ({**GOOD, "factors": {"control": {"x": {"window": "shifted"}, "y": {"window": "aligned"}}},
      "controls": {"x": {"alpha_tv": 0.5}}}, "factors.control: 'control' is reserved"),
    ({**GOOD, "name": "n" * 300}, "name: required; letters, digits"),
    ({**GOOD, "factors": {"D1": {"l" * 65: {"window": "shifted"}, "b": {"window": "aligned"}}}},
     "a level name must be letters, digits, '_', '-' and '.' only, starting with a letter or digit, at most 64"),
    ({**GOOD, "factors": {"D1": {True: {"window": "shifted"}, "b": {"window": "aligned"}}}},
     "factors.D1.True: YAML reads yes/no/on/off/true/false as a boolean"),
    ({**GOOD, "controls": {"a|b": {"alpha_tv": 0.5}}}, "controls.a|b: a control name must be"),
    # levels that change only plumbing train the same thing: the factor is dead
    ({**GOOD, "factors": {"out": {"a": {"out_dir": "x"}, "b": {"out_dir": "y"}}}},
     "factors.out: levels 'a' and 'b' train the same objective (they differ only in out_dir, which never"),
    ({**GOOD, "base": {"preset": "tiny", "target_path": "/etc/passwd"}},
     "target_path: /etc/passwd is not a saved dspark target"),
    ({**GOOD, "base": {"preset": "tiny", "target_path": "/nonexistent/t.pt"}},
     "target_path: /nonexistent/t.pt is not a file"),
    # generators that alias two main effects with each other (resolution II)
    ({"name": "g", "factors": THREE, "design": {"generators": {"C": "A"}}},
     "design.generators: main effects A and C are aliased (A = C, resolution II)"),
    ({"name": "g", "factors": THREE, "design": {"generators": {"C": "AB", "D": "AB"}}},
     "design.generators: main effects C and D are aliased (C = D, resolution II)"),
])
def test_hostile_specs_are_refused_before_any_work(raw, message):
    with pytest.raises(SpecError) as e:
        parse(raw)
    assert any(message in p for p in e.value.problems), e.value.problems


def test_every_trial_key_and_run_name_is_unique_and_fits_the_stores():
    long = {f"F{i}": {"a" * 60: {}, "b" * 60: {}} for i in range(5)}
    # five 60-character levels: the run name passes MLflow's 250 characters
    with pytest.raises(SpecError, match="its run name is 3.. characters, over MLflow's 250"):
        expand.check_trial_keys(parse({**GOOD, "factors": GOOD["factors"]}).trials[:0] + [
            specmod.Trial(key="k", cell="c", replicate=0, seed=0, levels={f: "a" * 60 for f in long},
                          arm="factorial", config=parse(GOOD).trials[0].config)])
    t = parse(GOOD).trials[0]
    with pytest.raises(SpecError, match="is also another design row's"):
        expand.check_trial_keys([t, t])
    s = parse({"name": "g", "factors": THREE, "design": {"generators": {"D": "ABC"}}, "replicates": 2})
    assert len({t.key for t in s.trials}) == len(s.trials) == 16


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    lines = ["name: bomb", 'l0: &l0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    lines.append(f"description: [{', '.join(['*l8'] * 9)}]")  # 9**10 strings once expanded
    (tmp_path / "bomb.yaml").write_text("\n".join(lines))
    with pytest.raises(SpecError, match="expands to more than 100000 nodes"):
        validate.load_spec(tmp_path / "bomb.yaml")
    (tmp_path / "big.yaml").write_text("#" * (validate.MAX_SPEC_BYTES + 1))
    with pytest.raises(SpecError, match="a spec may hold at most"):
        validate.load_spec(tmp_path / "big.yaml")
    # ordinary aliases still load
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(GOOD) + "x_anchor: &w {window: shifted}\n")
    with pytest.raises(SpecError, match="unknown key 'x_anchor'"):
        validate.load_spec(tmp_path / "ok.yaml")


def test_a_device_this_machine_lacks_is_refused_by_validate_and_run(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for one without")
    spec = tmp_path / "cuda.yaml"
    spec.write_text(yaml.safe_dump({**GOOD, "base": {"preset": "tiny", "device": "cuda"}}))
    for cmd in (["validate", str(spec)], ["run", str(spec), "--storage", str(tmp_path / "st")]):
        r = subprocess.run([sys.executable, "-m", "trials.cli", *cmd], capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("trials: error: device: cell ") and "torch sees no CUDA device" in r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "st").exists() and not (tmp_path / "mlflow.db").exists()
    r = subprocess.run([sys.executable, "-m", "trials.cli", "validate", str(spec), "--address", "auto"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "valid" in r.stdout  # a cluster's nodes are checked when it runs


def test_progress_columns_are_primary_measured_and_never_constant():
    """The progress lines, the end-of-sweep table and `trials status` show the sweep's
    primary responses: never a degenerate, constant or unmeasured one."""
    from trials.driver.progress import columns

    base = {"preset": "tiny", "data": ["x"]}
    D1 = {"D1": {"a": {"window": "shifted"}, "b": {"window": "aligned"}}}
    declared = parse({"name": "p", "base": base, "factors": D1,
                      "responses": {"tf/conf_ece": {"better": "lower", "margin": 0.01}}})
    assert columns(declared) == ["tf/conf_ece"]
    drafter = columns(parse({"name": "d", "base": base, "factors": D1}))
    assert drafter and "val/bpb" not in drafter  # the shared target's constant
    undecoded = columns(parse({"name": "u", "base": {**base, "spec_prompts": 0}, "factors": D1}))
    assert undecoded and not [c for c in undecoded if c.startswith("spec/")]
    backbone = columns(parse({"name": "b", "base": {**base, "parallel_stage": "backbone"}, "factors": D1}))
    assert backbone and not [c for c in backbone if c.startswith("tf/")]  # degenerate there


# ---- named contrasts: two settings of some factors (the seed's operating point) ----

FIVE = {**THREE, "E": {"lo": {"markov_rank": 16}, "hi": {"markov_rank": 32}}}
HALF = {"name": "half", "factors": FIVE, "design": {"generators": {"E": "ABCD"}}}
DIAGONAL = {"from": {"D": "lo", "E": "lo"}, "to": {"D": "hi", "E": "hi"}}


def test_a_named_contrast_is_parsed_validated_shown_and_may_be_primary(tmp_path):
    s = parse({**HALF, "contrasts": {"diagonal": DIAGONAL}, "primary_terms": ["diagonal", "E"]})
    assert s.design == "2^(5-1)" and len({t.cell for t in s.trials}) == 16
    assert s.contrasts == {"diagonal": DIAGONAL} and s.primary_terms == ["diagonal", "E"]
    path = tmp_path / "half.yaml"
    path.write_text(yaml.safe_dump({**HALF, "contrasts": {"diagonal": DIAGONAL}}))
    out = subprocess.run([sys.executable, "-m", "trials.cli", "validate", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "contrast diagonal: D=lo, E=lo -> D=hi, E=hi" in out.stdout


def test_validate_names_the_sweep_exactly_as_written(tmp_path):
    """The name is quoted as the spec spells it, never at a sentence start where it could
    read as capitalised (a user saw "My-d1d9: valid.")."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**HALF, "name": "my-d1D9"}))
    out = subprocess.run([sys.executable, "-m", "trials.cli", "validate", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sweep 'my-d1D9' is valid: design 2^(5-1), 5 factors, 16 cells x ")


@pytest.mark.parametrize("contrast, message", [
    ({"from": {"D": "lo"}, "to": {"E": "hi"}}, "contrasts.c: from and to must name the same factors"),
    ({"from": {"D": "lo"}, "to": {"D": "lo"}}, "contrasts.c: from and to are the same setting"),
    ({"from": {"Z": "lo"}, "to": {"Z": "hi"}}, "contrasts.c.from: 'Z' is not a factor"),
    ({"from": {"D": "lo"}, "to": {"D": "mid"}}, "contrasts.c.to.D: 'mid' is not one of its levels (lo, hi)"),
    ({"from": {"D": "lo"}}, "contrasts.c: {from: {FACTOR: LEVEL, ...}, to: {FACTOR: LEVEL, ...}}"),
    ({"from": {}, "to": {}}, "contrasts.c: {from:"),
    # in the half fraction, fixing four factors leaves one cell a side, so E is not averaged over
    ({"from": {"A": "lo", "B": "lo", "C": "lo", "D": "lo"}, "to": {"A": "hi", "B": "hi", "C": "hi", "D": "hi"}},
     "contrasts.c.from: the design's cells at A=lo, B=lo, C=lo, D=lo do not hold every level of E equally often"),
])
def test_a_named_contrast_that_is_not_a_difference_of_two_balanced_settings_is_refused(contrast, message):
    with pytest.raises(SpecError) as e:
        parse({**HALF, "contrasts": {"c": contrast}})
    assert any(message in p for p in e.value.problems), e.value.problems


def test_a_contrast_cannot_take_a_factor_or_control_name_and_is_named_in_primary_terms():
    with pytest.raises(SpecError, match="contrasts.A: 'A' is already a factor"):
        parse({**HALF, "contrasts": {"A": DIAGONAL}})
    with pytest.raises(SpecError, match="primary_terms: 'diag' is neither a factor.*contrasts: diagonal"):
        parse({**HALF, "contrasts": {"diagonal": DIAGONAL}, "primary_terms": ["diag"]})


def test_a_key_given_twice_or_absurd_nesting_is_refused_in_one_line(tmp_path, capsys):
    """YAML keeps the last of two equal keys without a word (a factor replaced, replicates 2
    -> 50): refused, naming the key and both lines. A 2 KB spec nested 1,000 deep (a
    RecursionError of thousands of lines) is refused in one line too, and `trials list`
    shows such a saved spec as unreadable while listing the others."""
    from trials import validate
    from trials.cli import main as trials

    dup = tmp_path / "dup.yaml"
    dup.write_text("name: d\nreplicates: 2\nfactors: {D1: {a: {window: shifted}, b: {window: aligned}}}\n"
                   "replicates: 50\n")
    with pytest.raises(SpecError) as e:
        validate.load_spec(dup)
    assert str(e.value).endswith("the key 'replicates' is given twice in one mapping (lines 2 and 4); YAML would "
                                 "keep the last one silently"), str(e.value)
    inner = tmp_path / "inner.yaml"
    inner.write_text("name: d\nfactors:\n  D1: {a: {window: shifted, window: aligned}, b: {window: aligned}}\n")
    with pytest.raises(SpecError, match="the key 'window' is given twice in one mapping"):
        validate.load_spec(inner)
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: d\nbase: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n")
    with pytest.raises(SpecError) as e:
        validate.load_spec(deep)
    assert "its YAML nests deeper than 32 levels" in str(e.value) and len(str(e.value).splitlines()) == 1
    # a saved spec that cannot be read: its row says so, the list goes on
    root = tmp_path / "st"
    (root / "deep").mkdir(parents=True)
    (root / "deep" / "spec.yaml").write_text(deep.read_text())
    (root / "deep" / "sweep.json").write_text('{"tracking_uri": "sqlite:///x.db"}')
    assert trials(["list", "--storage", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "unreadable: deep/spec.yaml: its YAML nests deeper than 32 levels" in listed, listed


def test_an_abbreviated_option_is_not_guessed(capsys):
    from analysis.cli import main as analysis
    from trials.cli import main as trials

    with pytest.raises(SystemExit) as e:
        trials(["status", "x", "--stor", "4"])
    assert e.value.code == 2 and "unrecognized arguments: --stor 4" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        analysis(["report", "x", "--track", "sqlite:///y.db"])
    assert "unrecognized arguments: --track" in capsys.readouterr().err


def test_a_run_name_names_the_factors_whose_level_names_are_shared():
    """Levels "off"/"on" for two factors would read "off·on r0": those factors are named in
    the run name; a factor whose levels are its own keeps the short form; names stay unique."""
    raw = {"name": "names", "base": {"preset": "tiny"}, "replicates": 2,
           "factors": {"dropout": {"off": {"lr": 1e-3}, "on": {"lr": 2e-3}},
                       "warmup": {"off": {"batch_size": 4}, "on": {"batch_size": 8}},
                       "D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}}}
    s = parse(raw)
    names = {t.run_name for t in s.trials}
    assert len(names) == len(s.trials) == 16
    assert "dropout=off·warmup=on·aligned r1" in names
    for t in s.trials:
        assert t.run_name.startswith(f"dropout={t.levels['dropout']}·warmup={t.levels['warmup']}·{t.levels['D1']} ")
    plain = parse({**raw, "factors": {k: v for k, v in raw["factors"].items() if k != "warmup"}})
    assert {t.run_name for t in plain.trials} >= {"off·shifted r0", "on·aligned r1"}


def test_a_plans_evaluation_maxima_are_the_workloads_own():
    """The keys a `sequential:` plan may cap are the workload's `sequential_fields`: the toy
    counts held-out batches, not prompts, so `max_prompts` is refused naming the toy's keys, and
    its `max_eval_batches` is checked against its trials' eval_batches."""
    toy = {"workload": "tests.toy.workload:WORKLOAD", "name": "capped", "replicates": 2,
           "factors": {"D1": {"a": {"norm": "none"}, "b": {"norm": "layer"}}},
           "responses": {"val/loss": {"margin": 0.01}}}
    ok = parse({**toy, "sequential": {"max_replicates": 4, "max_eval_batches": 64}})
    assert ok.sequential == {"max_replicates": 4, "max_eval_batches": 64, "alpha": 0.05}
    with pytest.raises(SpecError) as e:
        parse({**toy, "sequential": {"max_replicates": 4, "max_prompts": 64}})
    assert "sequential: {max_replicates: N, alpha: A, max_eval_batches: N, block_errors: own|pooled, look_every: L} " \
        "(max_replicates required)" in e.value.problems
    with pytest.raises(SpecError) as e:
        parse({**toy, "sequential": {"max_replicates": 4, "max_eval_batches": 1}})
    assert any(p.startswith("sequential.max_eval_batches: 1 is fewer than the trials' eval_batches") for p in e.value.problems)
