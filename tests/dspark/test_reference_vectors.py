"""The authors' reference code (DeepSpec) computed these numbers; we must match to 1e-5."""

import json
from pathlib import Path

import pytest
import torch

from dspark.heads import DraftHead, MarkovHead, RNNHead
from dspark.loss import dspark_loss

REF = json.loads((Path(__file__).parents[1] / "data" / "dspark_reference_vectors.json").read_text())
T = lambda x, dtype=torch.float32: torch.tensor(x, dtype=dtype)  # noqa: E731


@pytest.mark.parametrize("case", range(len(REF["loss_cases"])))
def test_loss_case(case):
    c = REF["loss_cases"][case]
    valid = T(c["eval_mask"]).bool()
    # the reference keeps a block only when it has a valid slot; our keep is derived
    assert torch.equal(valid.any(-1), T(c["block_keep_mask"]).bool())
    conf = None if c["confidence_logits"] is None else T(c["confidence_logits"])
    out = dspark_loss(draft_logits=T(c["draft_logits"]), target_logits=T(c["target_logits"]),
                      labels=T(c["target_ids"], torch.long), valid=valid, confidence_logits=conf,
                      decay_gamma=c["decay_gamma"], alphas=tuple(c["alpha"]))
    m = c["metrics"]
    atol = 1e-5
    assert out["loss"].item() == pytest.approx(c["total_loss"], abs=atol)
    assert out["loss"].item() == pytest.approx(m["train/loss"], abs=atol)
    assert out["ce"].item() == pytest.approx(m["train/ce_loss"], abs=atol)
    assert out["tv"].item() == pytest.approx(m["train/l1_loss"], abs=atol)
    assert out["tau_tf"].item() == pytest.approx(m["train/tau_probabilistic"], abs=atol)
    K = valid.shape[-1]
    for j in range(K):
        assert out["accept_rate"][j].item() == pytest.approx(m[f"train/accept_rate@{j}"], abs=atol)
    if conf is not None:
        assert out["conf"].item() == pytest.approx(m["train/confidence_loss"], abs=atol)
        assert out["conf_abs_error"].item() == pytest.approx(m["train/confidence_abs_error"], abs=atol)
        assert out["conf_bias"].item() == pytest.approx(m["train/confidence_bias"], abs=atol)
        assert out["conf_cumprod_bias"].item() == pytest.approx(m["train/confidence_cumprod_bias"], abs=atol)


def _markov(c):
    W1 = T(c["W1"])
    head = MarkovHead(W1.shape[0], W1.shape[1])
    with torch.no_grad():
        head.W1.weight.copy_(W1)
        head.W2.weight.copy_(T(c["W2_weight"]))
    return head


@pytest.mark.parametrize("case", range(len(REF["markov_cases"])))
def test_markov_bias(case):
    c = REF["markov_cases"][case]
    head = _markov(c)
    prev = T(c["prev_tokens"], torch.long)
    got = head(prev, None)
    torch.testing.assert_close(got, T(c["bias"]), atol=1e-5, rtol=0)


def _rnn(c):
    W1 = T(c["W1"])
    V, r = W1.shape
    jw = T(c["joint_weight"])
    d = jw.shape[1] - 2 * r
    head = RNNHead(V, r, d)
    with torch.no_grad():
        head.W1.weight.copy_(W1)
        head.W2.weight.copy_(T(c["W2_weight"]))
        head.joint.weight.copy_(jw)
        head.joint.bias.copy_(T(c["joint_bias"]))
    return head, V, r, d


@pytest.mark.parametrize("case", range(len(REF["rnn_cases"])))
def test_rnn_block_logits(case):
    c = REF["rnn_cases"][case]
    head, *_ = _rnn(c)
    base = T(c["base_logits"])
    got = base + head(T(c["prev_tokens"], torch.long), T(c["hidden"]))
    torch.testing.assert_close(got, T(c["logits"]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("case", range(len(REF["rnn_cases"])))
def test_rnn_greedy_sampling(case):
    c = REF["rnn_cases"][case]
    rnn, V, r, d = _rnn(c)
    draft = DraftHead("rnn", "hidden", V, d, r)
    draft.seq = rnn
    tokens, logits, _ = draft.sample_block_tokens(T(c["greedy_hidden"]), T(c["greedy_base_logits"]),
                                                  T(c["greedy_first_prev"], torch.long), temperature=0)
    assert tokens.tolist() == c["greedy_tokens"]
    torch.testing.assert_close(logits, T(c["greedy_logits"]), atol=1e-5, rtol=0)
