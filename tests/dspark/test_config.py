import pytest

from dspark.config import PRESETS, Config, from_dict, parse_overrides


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds(name):
    cfg = from_dict({"preset": name})
    assert cfg.preset == name and cfg.d_model == PRESETS[name]["d_model"]


def test_defaults_are_the_papers():
    cfg = Config()
    assert (cfg.window, cfg.decay_gamma, cfg.confidence_input) == ("aligned", "block", "hidden+markov")
    assert cfg.decay_denominator == cfg.block_size
    assert from_dict({"decay_gamma": "4"}).decay_denominator == 4.0


@pytest.mark.parametrize("overrides, message", [
    ({"window": "diagonal"}, "window: unknown level 'diagonal'; allowed: aligned, shifted, ids_only"),
    ({"head": "lstm"}, "head: unknown level 'lstm'; allowed: markov, rnn, none"),
    ({"confidence_input": "markov"}, "confidence_input: unknown level 'markov'"),
    ({"parallel_stage": "medusa"}, "parallel_stage: unknown level 'medusa'"),
    ({"anchors": "every"}, "anchors: unknown level 'every'"),
    ({"stride": 0}, "stride: must be >= 1, got 0"),
    ({"block_size": 0}, "block_size: must be >= 1, got 0"),
    ({"decay_gamma": 0.0}, "decay_gamma: must be a number > 0 or 'block'"),
    ({"decay_gamma": -2}, "decay_gamma: must be a number > 0 or 'block'"),
    ({"decay_gamma": "blocky"}, "decay_gamma: 'blocky' is neither a positive number nor 'block'"),
    ({"head": "none", "confidence_input": "hidden+markov"}, "confidence_input: 'hidden+markov' needs a sequential head"),
    ({"context_layers": (5,)}, "context_layers: layer 5 does not exist"),
    ({"preset": "huge"}, "preset: unknown preset 'huge'"),
    ({"lr": 0}, "lr: must be > 0"),
    ({"block_size": 200}, "block_size: 200 leaves no room"),
    ({"typo_field": 1}, "unknown config field(s): typo_field"),
])
def test_nonsense_is_refused_with_the_field_named(overrides, message):
    with pytest.raises(ValueError) as e:
        from_dict(overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_parse_overrides_types_values():
    got = parse_overrides(["window=shifted", "decay_gamma=4.0", "block_size=5", "context_layers=0,1"])
    assert got == {"window": "shifted", "decay_gamma": "4.0", "block_size": 5, "context_layers": (0, 1)}
    assert from_dict(got).decay_gamma == 4.0
    with pytest.raises(ValueError, match="--set nope: unknown config field"):
        parse_overrides(["nope=1"])
    with pytest.raises(ValueError, match="block_size: expected a int"):
        parse_overrides(["block_size=seven"])


def test_config_round_trips_through_strings():
    # MLflow params are strings: the load boundary must rebuild the same config
    cfg = from_dict({"preset": "tiny", "decay_gamma": 4.0, "context_layers": (0, 1), "data": ("a.txt",)})
    as_strings = {k: str(v) for k, v in cfg.to_dict().items()}
    assert from_dict(parse_overrides([f"{k}={v}" for k, v in as_strings.items()])) == cfg


def test_mkl_reproducible_mode_is_set_or_its_absence_is_said():
    """dspark sets MKL_CBWR before torch loads MKL; imported after torch, it warns."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}
    code = "import {}, {}, os; print(os.environ['MKL_CBWR'])"
    first = subprocess.run([sys.executable, "-W", "error", "-c", code.format("dspark", "torch")],
                           capture_output=True, text=True, env=env)
    assert first.returncode == 0 and first.stdout.strip() == "AUTO,STRICT", first.stderr
    late = subprocess.run([sys.executable, "-c", code.format("torch", "dspark")], capture_output=True, text=True, env=env)
    assert late.returncode == 0 and "torch was imported before dspark" in late.stderr


def test_tiny_preset_is_the_field_defaults():
    from dspark.config import Config

    assert from_dict({"preset": "tiny"}) == Config()
    assert Config().d_model == 64 and Config().precision == "fp32"


def test_every_field_declares_its_role_and_one_without_is_refused():
    import dataclasses

    from dspark.config import ROLES, knob, roles

    assert set(roles().values()) == set(ROLES)  # every field has one, and every role is used

    @dataclasses.dataclass
    class Grown(Config):
        new_knob: int = 3  # a field added without knob(ROLE, ...)

    with pytest.raises(TypeError, match="Grown.new_knob: declare it with knob"):
        roles(Grown)
    with pytest.raises(ValueError, match="role 'loss' is not one of"):
        knob("loss", 1)


def test_what_reads_the_roles_sorts_fields_as_before():
    from dspark.config import smoke_overrides, with_role
    from dspark.checkpoint import NOT_TRAINING, training_changes

    cfg = Config()
    # the shared target's address: the same 15 fields it always hashed
    assert sorted(cfg.target_dict()) == sorted([
        "d_model", "n_layers", "n_heads", "seq_len", "batch_size", "target_steps", "target_lr", "weight_decay",
        "warmup_steps", "grad_clip", "target_seed", "precision", "data", "text_column", "max_corpus_bytes"])
    # an HF target's address holds its source too (tests/dspark/test_hf_target.py)
    assert set(NOT_TRAINING) == {"preset", "out_dir", "target_path", "device", "checkpoint_every_s",
                                 "eval_interval", "eval_batches", "spec_prompts", "spec_prompt_len",
                                 "spec_new_tokens", "spec_interval_prompts", "sched_curve",
                                 "feature_cache"}  # a cache of the frozen target's features changes no result
    assert "out_dir" not in cfg.objective_dict() and "spec_prompts" in cfg.objective_dict()
    # resume: evaluation and plumbing may change, the objective may not
    assert training_changes(cfg.to_dict(), cfg.replace(spec_prompts=9, out_dir="elsewhere")) == []
    assert training_changes(cfg.to_dict(), cfg.replace(window="shifted")) == ["window"]
    smoke = smoke_overrides()
    assert smoke["draft_steps"] <= 10 and smoke["target_steps"] <= 10 and set(smoke) <= set(
        with_role("target", "objective", "evaluation"))
