"""An HF causal LM behind the drafter's target interface (dspark/hf_target.py, issue 59): the
gold tests of what it hands the drafter, against the model's own forward, and the one-line
refusals before any training."""

import pytest
import torch

from dspark.config import BUILT_TARGETS
from dspark.hf_target import (HFTarget, HFTargetError, built_config, built_model, check_layer_ids,
                              load_target_model, spread_layer_ids)

TINY = sorted(name for name, (width, _) in BUILT_TARGETS.items() if width <= 64)  # the CPU's built targets

transformers = pytest.importorskip("transformers")  # the `hf` extra, which make test and .ci/run install


@pytest.fixture(scope="module", params=TINY)
def model(request):
    m = built_model(request.param, seq_len=128, seed=0).eval()
    return m


def _ids(n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (2, n), generator=g)  # (B, T)


@torch.no_grad()
def test_a_hooked_layers_output_is_hidden_states_of_the_next_index(model):
    target = HFTarget(model, (0, 1, 2))
    ids = _ids(12)
    out = target(ids)
    ref = model(input_ids=ids, output_hidden_states=True)
    for i, got in enumerate(out.layer_hidden):
        if i in target.layer_ids:
            assert torch.equal(got, ref.hidden_states[i + 1]), i
        else:
            assert got is None, i  # only the hooked layers are kept
    assert torch.allclose(out.logits, ref.logits, atol=1e-5, rtol=0)
    assert torch.allclose(target.lm_head(out.hidden), ref.logits, atol=1e-5, rtol=0)  # the final normed state


@torch.no_grad()
def test_logits_match_the_models_own_with_a_cache_and_across_a_crop_then_extend(model):
    target = HFTarget(model, (1,))
    ids = _ids(20)
    full = model(input_ids=ids).logits  # (B, 20, V)
    cache = target.new_cache(2, 64)
    first = target(ids[:, :10], cache)
    assert cache.length == 10 and torch.allclose(first.logits, full[:, :10], atol=1e-5, rtol=0)
    # a drafted block of 5 whose first 2 tokens the target accepts: the cache is cropped back to them
    block = torch.cat([ids[:, 10:12], torch.randint(0, 256, (2, 3))], dim=1)  # (B, 5)
    drafted = target(block, cache)
    assert cache.length == 15 and torch.allclose(drafted.logits[:, :2], full[:, 10:12], atol=1e-5, rtol=0)
    cache.crop(12)
    assert cache.length == 12
    rest = target(ids[:, 12:20], cache)
    assert torch.allclose(rest.logits, full[:, 12:20], atol=1e-5, rtol=0)
    one = target.new_cache(2, 64)
    target(ids[:, :19], one)
    last = target(ids[:, 19:20], one)  # a single token on the cache
    assert torch.allclose(last.logits[:, 0], full[:, 19], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="KV cache full: 20 \\+ 50 > 64"):
        target(_ids(50), one)


def test_layer_ids_spread_as_deepspec_chooses_them_and_the_final_layer_is_refused(model):
    assert spread_layer_ids(36, 5) == (1, 9, 17, 25, 33)
    n = model.config.num_hidden_layers
    with pytest.raises(HFTargetError, match=f"{n - 1} is not below the final layer {n - 1}") as e:
        HFTarget(model, (1, n - 1))
    assert "\n" not in str(e.value)
    for bad in ((), (2, 1), (1, 1), (-1,), (True,)):
        with pytest.raises(HFTargetError, match="layer ids: "):
            check_layer_ids(bad, n)


def test_a_target_that_cannot_serve_is_refused_in_one_line_before_any_training(tmp_path):
    with pytest.raises(HFTargetError, match="no such model directory") as e:
        load_target_model(str(tmp_path / "missing"))
    assert "\n" not in str(e.value)
    small = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, num_key_value_heads=1)
    transformers.AutoModelForCausalLM.from_config(small).save_pretrained(tmp_path / "small")
    with pytest.raises(HFTargetError, match="a vocabulary of 128 tokens cannot encode the byte corpus"):
        load_target_model(str(tmp_path / "small"))
    transformers.T5Config(vocab_size=256, d_model=32, d_ff=64, num_layers=1, num_heads=2).save_pretrained(
        tmp_path / "t5")
    with pytest.raises(HFTargetError, match="a T5Config is not a causal LM"):
        load_target_model(str(tmp_path / "t5"))
    with pytest.raises(HFTargetError, match="not a config built in code"):
        built_model("gpt-huge")


def test_a_local_directory_loads_offline_and_serves_as_the_model_it_holds(tmp_path):
    made = built_model("qwen3-tiny", seq_len=64, seed=3).eval()
    made.save_pretrained(tmp_path / "mine")
    loaded = load_target_model(str(tmp_path / "mine")).eval()
    ids = _ids(8)
    with torch.no_grad():
        assert torch.allclose(HFTarget(loaded, (1,))(ids).logits, made(input_ids=ids).logits, atol=1e-6, rtol=0)


@torch.no_grad()
def test_speculative_greedy_decoding_on_the_hf_target_is_its_own_generate():
    """Lossless on the HF target: greedy speculative decoding emits exactly the tokens of
    `generate(do_sample=False)`, the cache cropped after every rejection."""
    from dspark.heads import DraftHead
    from dspark.model import Drafter
    from dspark.speculate import RoundStats, autoregressive, generate

    torch.manual_seed(0)
    model = built_model("qwen3-tiny", seq_len=128, seed=0).double().eval()
    target = HFTarget(model, (1, 2))
    D = target.d_model
    drafter = Drafter(D, 4, 1, (1, 2), 4).double().eval()
    head = DraftHead("markov", "hidden+markov", 256, D, 8).double().eval()
    head.seq.W2.weight.normal_(std=0.5)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        prompt = torch.randint(0, 256, (1, 10), generator=g)
        ref = model.generate(prompt, max_new_tokens=30, do_sample=False, pad_token_id=0)[0, 10:].tolist()
        stats = RoundStats()
        assert generate(target, drafter, head, prompt, 30, temperature=0, stats=stats) == ref
        assert autoregressive(target, prompt, 30, 0) == ref
        assert any(n < v for n, v in zip(stats.accepted, stats.verified))  # drafts rejected along the way


def test_a_config_naming_an_hf_target_is_checked_before_any_work(tmp_path):
    from tests.conftest import tiny

    ok = tiny(target_model="qwen3-tiny", n_layers=4, context_layers=(1, 2))
    assert ok.target_dict()["target_model"] == "qwen3-tiny"  # part of the shared target's address
    cases = {"n_layers": (dict(n_layers=2), "qwen3-tiny is 64 wide and 4 layers deep; set d_model=64 and n_layers=4"),
             "final": (dict(n_layers=4, context_layers=(1, 3)), "an HF target's are decoder layers 0..2"),
             "stage": (dict(n_layers=4, context_layers=(1,), parallel_stage="backbone"), "serves the drafter stage"),
             "missing": (dict(target_model=str(tmp_path / "nope"), n_layers=4, context_layers=(1,)),
                         "is neither an HF config built in code")}
    for name, (given, words) in cases.items():
        with pytest.raises(ValueError, match=words) as e:
            tiny(**{"target_model": "qwen3-tiny", "context_layers": (1, 2), **given})
        assert "\n" not in str(e.value), name


def test_a_shared_hf_target_is_trained_once_saved_and_loaded_by_its_trials(corpus_dir, tmp_path):
    """The sweep's path: the target stage trains the tiny HF target into a content-addressed
    file (loaded with weights_only=True), and a trial's drafter stage runs on it as loaded."""
    from dspark.train import Trainer, train_shared_target
    from dspark.targets import load_target
    from tests.conftest import tiny

    cfg = tiny(data=(str(corpus_dir),), target_model="qwen3-tiny", n_layers=4, context_layers=(1, 2),
               target_steps=6, draft_steps=4, eval_interval=3, block_size=4, spec_prompts=2, spec_prompt_len=8,
               spec_new_tokens=8, out_dir=str(tmp_path / "run"))
    meta = train_shared_target(cfg, tmp_path / "t.pt")
    assert meta["target_config"]["target_model"] == "qwen3-tiny" and meta["val/bpb"] > 0
    saved, _ = load_target(tmp_path / "t.pt")
    assert isinstance(saved, HFTarget) and saved.layer_ids == (1, 2)
    t = Trainer(cfg.replace(target_path=str(tmp_path / "t.pt")))
    final = t.run()
    assert t.target_loaded and final["spec/tau"] >= 1
    for (k, a), b in zip(saved.state_dict().items(), t.target.state_dict().values()):
        assert torch.equal(a, b), k  # frozen: the drafter stage changed none of the target's weights


def _sharp_models(seed: int = 0, K: int = 2, sharpness: float = 40.0):
    """A tiny HF target whose next-token distributions are peaked (its LM head scaled), and a
    random drafter of K slots that it often rejects: few outcomes hold the mass, so a sample
    of a few thousand decodings tests their distribution."""
    from dspark.heads import DraftHead
    from dspark.model import Drafter

    torch.manual_seed(seed)
    model = built_model("qwen3-tiny", seq_len=64, seed=seed).double().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    target = HFTarget(model, (1, 2))
    drafter = Drafter(target.d_model, 4, 1, (1, 2), K).double().eval()
    head = DraftHead("markov", "hidden+markov", 256, target.d_model, 8).double().eval()
    with torch.no_grad():
        head.seq.W2.weight.normal_(std=0.5)
    return model, target, drafter, head


@torch.no_grad()
def _exact_three(model, prompt: torch.Tensor, floor: float = 1e-4) -> dict[tuple, float]:
    """The target's own probability of each first three new tokens (t1, t2, t3) at temperature
    1, by its forward alone, for every (t1, t2) of probability above `floor`."""
    p1 = torch.softmax(model(prompt).logits[0, -1], -1)  # (V,)
    seqs = torch.cat([prompt.repeat(256, 1), torch.arange(256)[:, None]], 1)  # (V, P+1)
    p12 = p1[:, None] * torch.softmax(model(seqs).logits[:, -1], -1)  # (V, V)
    pairs = (p12 > floor).nonzero().tolist()
    seqs = torch.cat([prompt.repeat(len(pairs), 1), torch.tensor(pairs)], 1)  # (N, P+2)
    p3 = torch.softmax(model(seqs).logits[:, -1], -1)  # (N, V)
    return {(a, b, c): float(p12[a, b] * p3[i, c]) for i, (a, b) in enumerate(pairs) for c in range(256)}


def test_speculative_sampling_on_the_hf_target_draws_the_targets_own_distribution():
    """Lossless at temperature 1 on the HF target: the first three new tokens of speculative
    decoding over 500 seeds follow the target's own joint distribution, computed by its
    forward alone (chi-square; each outcome of expected count >= 5 a bin, the rest one), with
    drafts accepted and rejected and the cache cropped along the way (K = 2: the third token
    comes after a rollback whenever the first draft is rejected). It tests the HF target's
    logits, cache and positions at temperature 1; with this random drafter's rare acceptances
    it has little power against a wrong rejection residual, which the Markov-chain test
    (tests/dspark/test_speculate.py, target-free) holds to account."""
    from scipy.stats import chisquare

    from dspark.speculate import RoundStats, generate

    model, target, drafter, head = _sharp_models(sharpness=25.0)
    prompt = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(3))
    exact = _exact_three(model, prompt)
    N, counts, stats = 500, {}, RoundStats()
    for s in range(N):
        got = tuple(generate(target, drafter, head, prompt, 3, 1.0, torch.Generator().manual_seed(s), stats))
        counts[got] = counts.get(got, 0) + 1
    bins = [t for t, p in exact.items() if p * N >= 5]
    observed = [counts.get(t, 0) for t in bins] + [N - sum(counts.get(t, 0) for t in bins)]
    expected = [exact[t] * N for t in bins] + [N * (1 - sum(exact[t] for t in bins))]
    assert len(bins) >= 8 and 0 < sum(stats.accepted) < sum(stats.verified)  # a test with power; both paths taken
    assert chisquare(observed, expected).pvalue > 1e-3


def test_every_built_config_has_the_shape_the_config_checks_it_by():
    """The configs built in code (tiny ones for the CPU, Qwen3-0.6B's shape for a lent GPU's
    study) are the width and depth `BUILT_TARGETS` states, which `Config` checks without
    transformers; the 0.6B shape has Qwen3-0.6B's heads and MLP (its weights are not built here)."""
    for name, (width, depth) in BUILT_TARGETS.items():
        config = built_config(name)
        assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (width, depth, 256), name
    wide = built_config("qwen3-0.6b-shape")
    assert (wide.num_attention_heads, wide.num_key_value_heads, wide.head_dim, wide.intermediate_size) == (16, 8, 128, 3072)
    assert spread_layer_ids(28, 5) == (1, 7, 13, 19, 25)  # the drafter's context layers on it
