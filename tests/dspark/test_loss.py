import math

import pytest
import torch

from dspark.loss import acceptance_target, dspark_loss, position_weights


def test_position_weights_formula():
    w = position_weights(7, 7.0)
    assert w.shape == (7,)
    for k in range(1, 8):
        assert w[k - 1].item() == pytest.approx(math.exp(-(k - 1) / 7.0))
    # the seed's 4.0 at K=7 vs the paper's gamma=K (the audit's D2 numbers)
    assert [round(v, 2) for v in position_weights(4, 4.0).tolist()] == [1.0, 0.78, 0.61, 0.47]
    assert torch.equal(position_weights(3, None), torch.ones(3))
    with pytest.raises(ValueError, match="decay_gamma"):
        position_weights(3, 0.0)


def test_acceptance_target_endpoints():
    V = 8
    same = torch.randn(2, V)
    assert torch.allclose(acceptance_target(same, same), torch.ones(2))
    onehot = torch.full((V,), -1e4)
    onehot[0] = 1e4
    uniform = torch.zeros(V)
    # one-hot vs uniform: 1 - 0.5 * ((1 - 1/V) + (V-1)/V) = 1/V
    assert acceptance_target(onehot, uniform).item() == pytest.approx(1 / V, abs=1e-6)


def test_invalid_slots_do_not_count():
    torch.manual_seed(0)
    d, t = torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 5)
    labels = torch.randint(0, 5, (1, 2, 3))
    valid = torch.tensor([[[1, 1, 0], [1, 0, 0]]]).bool()
    a = dspark_loss(draft_logits=d, target_logits=t, labels=labels, valid=valid,
                    confidence_logits=torch.randn(1, 2, 3), decay_gamma=7.0)
    d2 = d.clone()
    d2[0, 0, 2] += 100.0  # change only invalid slots
    d2[0, 1, 1:] -= 50.0
    b = dspark_loss(draft_logits=d2, target_logits=t, labels=labels, valid=valid, confidence_logits=None,
                    decay_gamma=7.0)
    assert a["ce"].item() == pytest.approx(b["ce"].item())
    assert a["tv"].item() == pytest.approx(b["tv"].item())


def test_loss_gradient_reaches_draft_and_confidence_but_not_target():
    d = torch.randn(2, 3, 4, 6, requires_grad=True)
    t = torch.randn(2, 3, 4, 6, requires_grad=True)
    c = torch.randn(2, 3, 4, requires_grad=True)
    out = dspark_loss(draft_logits=d, target_logits=t.detach(), labels=torch.randint(0, 6, (2, 3, 4)),
                      valid=torch.ones(2, 3, 4).bool(), confidence_logits=c, decay_gamma=4.0)
    out["loss"].backward()
    assert d.grad.abs().sum() > 0 and c.grad.abs().sum() > 0 and t.grad is None


def test_the_loss_takes_keywords_only():
    d, t = torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 5)
    with pytest.raises(TypeError):
        dspark_loss(d, t, torch.zeros(1, 2, 3, dtype=torch.long), torch.ones(1, 2, 3).bool(), None, 7.0)
