import pytest
import torch

from dspark.heads import DraftHead, RNNHead


def test_rnn_head_matches_a_hand_rolled_three_step_loop():
    torch.manual_seed(0)
    V, r, d = 5, 3, 4
    head = RNNHead(V, r, d)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p))
    prev = torch.tensor([1, 4, 2])
    h = torch.randn(3, d)
    W1, W2 = head.W1.weight, head.W2.weight
    Wj, bj = head.joint.weight, head.joint.bias
    s = torch.zeros(r)  # s_0 = 0
    expected = []
    for k in range(3):
        z = torch.cat([s, W1[prev[k]], h[k]])
        pre = Wj @ z + bj
        g, c, o = pre[:r], pre[r:2 * r], pre[2 * r:]  # gate, candidate, output, in this order
        s = torch.sigmoid(g) * s + (1 - torch.sigmoid(g)) * torch.tanh(c)
        expected.append(W2 @ torch.tanh(o))
    got = head(prev, h)
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-6, rtol=0)


def test_confidence_head_width_is_d_plus_r_with_markov_feature():
    d, r = 24, 8
    assert DraftHead("markov", "hidden+markov", 256, d, r).conf.in_features == d + r
    assert DraftHead("rnn", "hidden+markov", 256, d, r).conf.in_features == d + r
    assert DraftHead("markov", "hidden", 256, d, r).conf.in_features == d


def test_confidence_with_markov_reads_the_previous_token():
    torch.manual_seed(0)
    head = DraftHead("markov", "hidden+markov", 16, 8, 4)
    h = torch.randn(1, 3, 8)
    U = torch.randn(1, 3, 16)
    _, c1 = head(h, U, torch.tensor([[1, 2, 3]]))
    _, c2 = head(h, U, torch.tensor([[1, 5, 3]]))
    assert c1[0, 0] == c2[0, 0] and c1[0, 1] != c2[0, 1]
    hidden_only = DraftHead("markov", "hidden", 16, 8, 4)
    _, c3 = hidden_only(h, U, torch.tensor([[1, 2, 3]]))
    _, c4 = hidden_only(h, U, torch.tensor([[1, 5, 3]]))
    assert torch.equal(c3, c4)


def test_no_sequential_head_is_the_bare_parallel_drafter():
    head = DraftHead("none", "hidden", 16, 8, 4)
    U = torch.randn(2, 3, 16)
    draft, _ = head(torch.randn(2, 3, 8), U, torch.zeros(2, 3, dtype=torch.long))
    assert torch.equal(draft, U)


def test_markov_inference_tables_match_the_general_path():
    torch.manual_seed(0)
    for conf_input in ("hidden+markov", "hidden"):
        head = DraftHead("markov", conf_input, 32, 8, 4)
        with torch.no_grad():
            head.seq.W2.weight.normal_()
        h, U = torch.randn(3, 5, 8), torch.randn(3, 5, 32)
        first = torch.tensor([1, 7, 30])
        with torch.no_grad():
            fast = head.sample_block_tokens(h, U, first, temperature=0)
        slow = head.sample_block_tokens(h, U, first, temperature=0)  # grad enabled: the general path
        assert torch.equal(fast[0], slow[0])
        torch.testing.assert_close(fast[1], slow[1].detach(), atol=1e-5, rtol=0)
        torch.testing.assert_close(fast[2], slow[2].detach(), atol=1e-5, rtol=0)
        # teacher forced on the sampled tokens gives the same logits and confidences
        prev = torch.cat([first[:, None], fast[0][:, :-1]], 1)
        draft, conf = head(h, U, prev)
        torch.testing.assert_close(fast[1], draft.detach(), atol=1e-5, rtol=0)
        torch.testing.assert_close(fast[2], conf.detach(), atol=1e-5, rtol=0)


@pytest.mark.parametrize("head", ["markov", "rnn"])
@pytest.mark.parametrize("confidence_input", ["hidden", "hidden+markov"])
def test_ce_tv_gradient_reaches_w1_at_step_0_in_both_d9_arms(head, confidence_input):
    """W2 starts from DeepSpec's normal init, not zero: with W2 = 0 the CE/TV gradient
    into W1 is zero at step 0 and only the hidden+markov arm's confidence loss reaches
    W1, so D9 would change how the sequential head starts training."""
    from dspark.loss import dspark_loss

    torch.manual_seed(0)
    B, A, K, V, D, R = 2, 3, 4, 256, 16, 8
    dh = DraftHead(head, confidence_input, V, D, R)
    assert dh.seq.W2.weight.abs().sum() > 0 and dh.seq.W2.weight.std().item() == pytest.approx(0.02, rel=0.1)
    h, U = torch.randn(B, A, K, D), torch.randn(B, A, K, V)
    target, prev = torch.randn(B, A, K, V), torch.randint(0, V, (B, A, K))
    labels, valid = torch.randint(0, V, (B, A, K)), torch.ones(B, A, K, dtype=torch.bool)

    def w1_grad():
        dh.zero_grad()
        draft, conf = dh(h, U, prev)
        # CE and TV only: the confidence loss's own path into W1 is switched off
        dspark_loss(draft_logits=draft, target_logits=target, labels=labels, valid=valid, confidence_logits=conf,
                    decay_gamma=7.0, alphas=(0.1, 0.9, 0.0))["loss"].backward()
        return dh.seq.W1.weight.grad.norm().item()

    assert w1_grad() > 0
    with torch.no_grad():  # the old init: W2 = 0 starves W1 of the CE/TV gradient
        dh.seq.W2.weight.zero_()
    assert w1_grad() == 0


def test_markov_fast_path_samples_each_slot_from_its_distribution():
    """The inference path draws a block with Gumbel-max noise; each slot's token must
    follow softmax(logits / T) given the token drawn before it."""
    torch.manual_seed(0)
    V, K, D, B, T = 6, 3, 8, 40000, 0.7
    head = DraftHead("markov", "hidden+markov", V, D, 4).eval()
    with torch.no_grad():
        head.seq.W1.weight.normal_(0, 1.0)
        head.seq.W2.weight.normal_(0, 1.0)
        h = torch.randn(1, K, D).expand(B, K, D)
        U = torch.randn(1, K, V).expand(B, K, V)
        first = torch.zeros(B, dtype=torch.long)
        tokens, logits, _ = head.sample_block_tokens(h, U, first, T, torch.Generator().manual_seed(1))
    p0 = torch.softmax(logits[0, 0] / T, -1)
    f0 = torch.bincount(tokens[:, 0], minlength=V).float() / B
    assert (f0 - p0).abs().max() < 0.015
    a = int(p0.argmax())  # slot 2 given slot 1 drew a
    rows = tokens[:, 0] == a
    p1 = torch.softmax(logits[rows][0, 1] / T, -1)
    f1 = torch.bincount(tokens[rows, 1], minlength=V).float() / rows.sum()
    assert (f1 - p1).abs().max() < 0.03
