"""Speculative decoding: greedy exactness, lossless sampling, KV caches."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from dspark.heads import DraftHead
from dspark.model import Drafter, TargetLM
from dspark.speculate import RoundStats, autoregressive, compiled, generate, one_round, prefill, sample, verify
from dspark.train import Trainer
from tests.conftest import TARGETS, tiny


# ---------- verify() with stub distributions of fixed logits ----------

def test_sample_draws_what_multinomial_draws_and_never_a_zero_weight():
    """`sample` is torch.multinomial's one-sample draw without its checks: the same index
    from the same generator state, on unnormalised weights too."""
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(200):
        w = torch.rand(50, generator=g1) * (torch.rand(50, generator=g1) < 0.3)
        w[7] = 0.5  # at least one positive weight
        g2.set_state(g1.get_state())
        got = sample(w * 3.0, g1)  # unnormalised
        assert got == int(torch.multinomial(w / w.sum(), 1, generator=g2)) and w[got] > 0


def test_verify_always_accepts_an_agreeing_drafter():
    p = torch.softmax(torch.randn(4, 6), -1)
    n, tok = verify(p, p[:3], torch.tensor([0, 1, 2]), torch.Generator().manual_seed(0))
    assert n == 3 and 0 <= tok < 6


def test_verify_never_accepts_outside_the_targets_support():
    p_target = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    p_draft = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    for seed in range(20):
        n, tok = verify(p_target, p_draft, torch.tensor([2, 2]), torch.Generator().manual_seed(seed))
        assert n == 0 and tok in (0, 1)  # the residual max(0, p_t - p_d) has no mass on 2


def test_verify_greedy_one_hot_rows():
    eye = torch.eye(5)
    p_target = eye[[1, 2, 3, 4]]  # target's argmax chain 1, 2, 3 then bonus 4
    n, tok = verify(p_target, eye[[1, 2, 0]], torch.tensor([1, 2, 0]))
    assert (n, tok) == (2, 3)  # first mismatch at slot 3: the target's token replaces it
    assert verify(p_target, eye[[1, 2, 3]], torch.tensor([1, 2, 3])) == (3, 4)


def test_verify_checks_row_counts():
    with pytest.raises(ValueError, match="p_target needs K\\+1=3 rows"):
        verify(torch.ones(2, 4) / 4, torch.ones(2, 4) / 4, torch.tensor([0, 1]))


V, K, N_TOK, SAMPLES = 4, 2, 3, 12000
_rng = np.random.default_rng(0)
T_CHAIN = _rng.dirichlet(np.ones(V), size=V)
T_CHAIN[np.arange(V), (np.arange(V) + 3) % V] = 0.0  # a hole per row for the "never" drafter
T_CHAIN /= T_CHAIN.sum(1, keepdims=True)
DRAFTERS = {
    "always": T_CHAIN.copy(),
    "never": np.eye(V)[(np.arange(V) + 3) % V],
    "between": _rng.dirichlet(np.ones(V), size=V),
}


def _spec_chain(q: np.ndarray, gen: torch.Generator, verify_fn=verify):
    """First N_TOK tokens after anchor 0 under speculative sampling with Markov-chain stubs."""
    T = torch.tensor(T_CHAIN, dtype=torch.float64)
    Q = torch.tensor(q, dtype=torch.float64)
    out, prev = [], 0
    while len(out) < N_TOK:
        toks, rows, p = [], [], prev
        for _ in range(K):
            t = int(torch.multinomial(Q[p], 1, generator=gen))
            toks.append(t)
            rows.append(Q[p])
            p = t
        p_target = torch.stack([T[c] for c in [prev] + toks])
        n, tok = verify_fn(p_target, torch.stack(rows), torch.tensor(toks), gen)
        out += toks[:n] + [tok]
        prev = out[-1]
    return out[:N_TOK]


def _exact():
    probs = np.zeros((V,) * N_TOK)
    for idx in np.ndindex(*probs.shape):
        p, prev = 1.0, 0
        for t in idx:
            p *= T_CHAIN[prev, t]
            prev = t
        probs[idx] = p
    return probs.ravel()


def _p_value(q, verify_fn=verify):
    gen = torch.Generator().manual_seed(1234)
    counts = np.zeros(V ** N_TOK)
    for _ in range(SAMPLES):
        counts[np.ravel_multi_index(_spec_chain(q, gen, verify_fn), (V,) * N_TOK)] += 1
    exp = _exact() * SAMPLES
    keep = exp > 0
    assert counts[~keep].sum() == 0  # nothing outside the target's support
    return chisquare(counts[keep], exp[keep]).pvalue


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_speculative_sampling_is_lossless(name):
    assert _p_value(DRAFTERS[name]) > 1e-3


def test_the_test_catches_a_wrong_residual():
    def wrong(p_target, p_draft, toks, gen=None):
        # on rejection, resample from p_target instead of norm(max(0, p_target - p_draft))
        for k in range(len(toks)):
            if torch.rand(1, generator=gen) * p_draft[k, toks[k]] >= p_target[k, toks[k]]:
                return k, int(torch.multinomial(p_target[k], 1, generator=gen))
        return len(toks), int(torch.multinomial(p_target[-1], 1, generator=gen))

    assert _p_value(DRAFTERS["between"], wrong) < 1e-3


# ---------- real models: greedy exactness and KV caches ----------



def _random_models(seed=0, K=4, kind="byte"):
    torch.manual_seed(seed)
    if kind == "hf":
        from dspark.hf_target import HFTarget, built_model

        target, layers, D = HFTarget(built_model("qwen3-tiny", seq_len=128, seed=seed), (1, 2)), (1, 2), 64
    else:
        target, layers, D = TargetLM(32, 2, 4, 128), (0, 1), 32
    drafter = Drafter(D, 4, 1, layers, K)
    head = DraftHead("markov", "hidden+markov", 256, D, 8)
    with torch.no_grad():
        head.seq.W2.weight.normal_(std=0.5)
    return [m.double().eval() for m in (target, drafter, head)]


@pytest.fixture(scope="module")
def trained(corpus_dir, tmp_path_factory):
    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path_factory.mktemp("spec")), target_steps=40,
               draft_steps=40, block_size=5)
    t = Trainer(cfg)
    t.run()
    return [m.double().eval() for m in (t.target, t.drafter, t.head)], t.corpus


def _prompts(seed, n=3, P=12):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(32, 127, (1, P), generator=g) for _ in range(n)]


@pytest.mark.parametrize("kind", TARGETS)
def test_greedy_speculative_equals_greedy_random_drafter(kind):
    target, drafter, head = _random_models(kind=kind)
    for prompt in _prompts(1):
        assert generate(target, drafter, head, prompt, 40, temperature=0) == autoregressive(target, prompt, 40, 0)


def test_greedy_speculative_equals_greedy_trained_drafter(trained):
    (target, drafter, head), corpus = trained
    for i in range(3):
        prompt = corpus.val[i * 200:i * 200 + 24].long()[None]
        assert generate(target, drafter, head, prompt, 48, temperature=0) == autoregressive(target, prompt, 48, 0)


def test_compiled_decoding_traces_and_stays_greedy_exact():
    """`compiled` runs both decoders through torch.compile (dynamo's tracing of the KV
    caches' in-place writes and lengths; the eager backend spares CI inductor's C++
    compile): greedy speculative decoding still equals greedy autoregressive decoding."""
    torch._dynamo.reset()
    target, drafter, head = _random_models(seed=3)
    ct, cd, ch = compiled(target, drafter, head, backend="eager")
    for prompt in _prompts(9, n=2):
        ref = autoregressive(target, prompt, 30, temperature=0)
        assert autoregressive(ct, prompt, 30, temperature=0) == ref
        assert generate(ct, cd, ch, prompt, 30, temperature=0) == ref
    assert cd.K == drafter.K  # the wrapper hands every other attribute to the drafter
    assert ch.seq is head.seq and head.chain is not ch.chain  # the copy shares weights; the head is unchanged


@pytest.mark.parametrize("kind", TARGETS)
def test_target_cache_matches_full_forward_after_accepts_and_rollbacks(kind):
    target, _, _ = _random_models(kind=kind)
    seq = torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(3))
    cache = target.new_cache(1, 64)
    target(seq[:, :10], cache)
    target(seq[:, 10:18], cache)  # a verification pass of 8
    cache.crop(13)  # reject after 3 accepted: positions 13.. are stale
    wrong = torch.randint(0, 256, (1, 5))
    target(wrong, cache)  # a second draft, then roll back again
    cache.crop(13)
    out = target(seq[:, 13:30], cache)
    full = target(seq)
    # the HF model computes its rotary angles in fp32 whatever its dtype: 1e-7 apart in double
    torch.testing.assert_close(out.logits, full.logits[:, 13:30], atol=1e-10 if kind == "byte" else 1e-6, rtol=0)
    assert cache.length == 30


@pytest.mark.parametrize("kind", TARGETS)
def test_drafter_context_cache_matches_the_training_pass(kind):
    target, drafter, _ = _random_models(K=4, kind=kind)
    seq = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(4))
    full = target(seq)
    anchors = torch.tensor([[21]])
    h_train = drafter(drafter.context(full.layer_hidden), target.wte(seq[:, 21:22]), anchors)[0, 0]  # (K, D)
    cache = drafter.new_context_cache(64)
    cut = lambda a, b: [h[:, a:b] if h is not None else None for h in full.layer_hidden]  # noqa: E731 (hf: hooked only)
    drafter.extend_context(cache, cut(0, 15))
    drafter.extend_context(cache, cut(15, 30))  # extended past the anchor
    cache.crop(21)  # ...and rolled back to it
    h_inf = drafter.draft_hidden(cache, target.wte(seq[0, 21:22]), 21)[0]
    torch.testing.assert_close(h_inf, h_train, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", TARGETS)
def test_confidence_scheduled_truncation_keeps_greedy_exact(kind):
    target, drafter, head = _random_models(kind=kind)
    prompt = _prompts(2, n=1)[0]
    state = prefill(target, drafter, prompt, 128, 0)
    while len(state.tokens) - prompt.shape[1] < 40:
        one_round(target, drafter, head, state, 0, verify_len=lambda c: int((torch.sigmoid(c) > 0.5).sum()))
    got = state.tokens[prompt.shape[1]:prompt.shape[1] + 40]
    assert got == autoregressive(target, prompt, 40, 0)


def test_unconditional_accept_rate_and_static_threshold_rule():
    from dspark.speculative_eval import accept_at, accept_rate_at, static_threshold_lengths

    accepted = [0, 1, 3, 3, 2]  # draft tokens accepted per round, K = 3
    assert accept_rate_at(accepted, 3) == [4 / 5, 3 / 5, 2 / 5]  # all of slots 1..k accepted, over all rounds
    assert accept_at(accepted, 3) == [4 / 5, 3 / 4, 2 / 3]  # conditional on reaching slot k
    conf = np.array([[0.9, 0.4, 0.9], [0.2, 0.9, 0.9], [0.8, 0.7, 0.6], [0.5, 0.5, 0.49]])
    # cut at the first raw c_k below t (DeepSpec's static rule), not at the product
    assert static_threshold_lengths(conf, 0.5).tolist() == [1, 0, 3, 2]
    assert static_threshold_lengths(conf, 0.1).tolist() == [3, 3, 3, 3]


def test_the_acceptance_metrics_state_the_hardest_prompts_too():
    from dspark.speculative_eval import acceptance_metrics

    taus = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]  # per prompt
    m = acceptance_metrics([0, 1, 2, 3], taus, K=4)
    assert m["spec/tau_p10"] == pytest.approx(2.0)  # numpy's linear percentile of 1..11
    assert np.isnan(acceptance_metrics([0], [], K=4)["spec/tau_p10"])


@pytest.mark.parametrize("kind", TARGETS)
def test_ragged_prompts_decode_each_request_as_alone(kind):
    """An evaluation decodes prompts of different lengths one request at a time, none padded
    (`speculative_eval.decode_set`): every request's tokens, greedy and sampled, are those it
    gets decoded alone with its own seed, and its greedy tokens the target's own; a request's
    rounds do not depend on the requests before it (state, caches, generators all its own)."""
    from dspark.blocks import Models
    from dspark.speculative_eval import DECODE_SEED, decode_set

    target, drafter, head = _random_models(seed=5, kind=kind)
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(32, 127, (1, P), generator=g) for P in (5, 17, 9)]
    for temperature in (0.0, 1.0):
        together, taus, _, _ = decode_set(Models(target, head, drafter, drafter.K), prompts, 24, temperature, "cpu")
        for i, prompt in enumerate(prompts):
            alone = RoundStats()
            gen = torch.Generator().manual_seed(DECODE_SEED + i)  # request i's seed, as in the set
            tokens = generate(target, drafter, head, prompt, 24, temperature, gen, alone)
            start = sum(together.prompt_rounds[:i])
            assert together.accepted[start:start + together.prompt_rounds[i]] == alone.accepted, (kind, temperature, i)
            assert taus[i] == pytest.approx(float(np.mean([n + 1 for n in alone.accepted])))
            if temperature == 0:
                assert tokens == autoregressive(target, prompt, 24, 0)
