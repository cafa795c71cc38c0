"""The teacher-forced evaluation's jackknife records (`jack/<R>@g<k>`) and the held-out
batches a longer evaluation draws: each jack value is the response recomputed directly on
the batches left after deleting one group."""

import math

import pytest
import torch

from dspark import calibration
from dspark.data import fixed_batches, held_out_batches
from dspark.evaluate import JACK_RESPONSES, lm_bpb, teacher_forced
from dspark.metrics import JACK_GROUPS, jack_name
from dspark.train import Trainer, train
from tests.conftest import tiny


@pytest.fixture(scope="module")
def trainer(corpus_dir, tmp_path_factory):
    """An untrained drafter-stage trainer (the identities below hold for any weights)."""
    torch.manual_seed(0)
    t = Trainer(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path_factory.mktemp("ev")), eval_batches=20))
    t.target.eval()
    t.head.eval()
    t.drafter.eval()
    return t


def _evaluate(t, batches, final=True):
    return teacher_forced(t.models, batches, t.cfg.stride, t.device, t.autocast, jackknife_groups=final)


def _kept(batches, G, g):
    return [b for i, b in enumerate(batches) if i % G != g]


def test_jack_bpb_is_the_bpb_of_the_batches_left(trainer):
    batches = trainer.val_batches  # 20 batches: G = 16, groups 0..3 hold two batches each
    m = _evaluate(trainer, batches)
    assert m["split/eval_batches"] == 20.0
    assert m["val/bpb"] == pytest.approx(lm_bpb(trainer.target, batches, trainer.device, trainer.autocast))
    values = []
    for g in range(JACK_GROUPS):
        direct = lm_bpb(trainer.target, _kept(batches, JACK_GROUPS, g), trainer.device, trainer.autocast)
        assert m[jack_name("val/bpb", g)] == pytest.approx(direct, rel=1e-9), g
        values.append(direct)
    assert len(set(values)) == JACK_GROUPS  # each deletion changes the value: no group is empty
    assert jack_name("val/bpb", JACK_GROUPS) not in m


def test_jack_calibration_and_tau_are_recomputed_without_the_group(trainer):
    batches = trainer.val_batches[:6]  # G = 6
    m = _evaluate(trainer, batches)
    for g in range(6):
        kept = _kept(batches, 6, g)
        again = _evaluate(trainer, kept, final=False)  # the whole evaluation, run on the kept batches
        for r in JACK_RESPONSES:
            assert m[jack_name(r, g)] == pytest.approx(again[r], rel=1e-9), (r, g)
        # and ECE straight from the kept batches' pooled predictions, through dspark.calibration
        pred, label = _predictions(trainer, kept)
        assert m[jack_name("tf/conf_ece", g)] == pytest.approx(calibration.ece(pred, label), rel=1e-6)
        assert m[jack_name("tf/conf_ece", g)] != m["tf/conf_ece"]


def _predictions(t, batches):
    """The confidence head's predictions and the soft labels c* on every valid slot."""
    from dspark.blocks import draft_blocks
    from dspark.loss import acceptance_target
    from dspark.windows import strided_anchors

    preds, labels = [], []
    with torch.no_grad():
        for x in batches:
            anchors = strided_anchors(x.shape[1] - 1, t.cfg.stride).expand(x.shape[0], -1)  # (B, A)
            out = draft_blocks(t.models, x, anchors, "aligned")
            c_star = acceptance_target(out.draft_logits.float(), out.target_logits.float())  # (B, A, K)
            preds.append(torch.sigmoid(out.conf_logits.float())[out.valid])
            labels.append(c_star[out.valid])
    return torch.cat(preds).numpy(), torch.cat(labels).numpy()


@pytest.mark.parametrize("n, groups", [(1, 0), (2, 2), (3, 3), (16, 16), (20, 16)])
def test_groups_are_min_of_batches_and_16_and_one_batch_has_none(trainer, n, groups):
    m = _evaluate(trainer, trainer.val_batches[:n])
    jack = [k for k in m if k.startswith("jack/")]
    assert len(jack) == groups * len(JACK_RESPONSES)
    assert {k.rsplit("@g", 1)[1] for k in jack} == {str(g) for g in range(groups)}
    assert all(math.isfinite(m[k]) for k in jack)
    assert m["split/eval_batches"] == float(n)
    assert not any(k.startswith("jack/") for k in _evaluate(trainer, trainer.val_batches[:n], final=False))


def test_only_the_final_evaluation_of_a_run_records_its_jackknife(corpus_dir, tmp_path):
    reports = []
    final = train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_steps=4, draft_steps=4,
                       eval_interval=2, eval_batches=3), report=lambda m, c: reports.append(m))
    with_jack = [m["step"] for m in reports if jack_name("val/bpb", 0) in m]
    assert with_jack == [8, 8]  # the stage's last evaluation, and the final report repeating it
    assert [m["step"] for m in reports if "tf/tau" in m and m["step"] < 8] == [4, 6]  # intermediate: none
    assert {k for k in final if k.startswith("jack/tf/tau@")} == {f"jack/tf/tau@g{g}" for g in range(3)}
    assert final["split/eval_batches"] == 3.0


def test_a_longer_evaluation_keeps_the_runs_batches_first(trainer):
    val, B, L = trainer.corpus.val, trainer.cfg.batch_size, trainer.cfg.seq_len + 1
    own = fixed_batches(val, 3, B, L)
    longer = held_out_batches(val, 7, B, L, first=3)
    assert len(longer) == 7 and all(b.shape == (B, L) for b in longer)
    assert all(torch.equal(a, b) for a, b in zip(own, longer[:3]))
    seen = {tuple(w.tolist()) for b in own for w in b}
    assert not any(tuple(w.tolist()) in seen for b in longer[3:] for w in b)  # new windows, not repeats
    shorter = held_out_batches(val, 2, B, L, first=3)
    assert len(shorter) == 2 and all(torch.equal(a, b) for a, b in zip(own, shorter))
    assert all(torch.equal(a, b) for a, b in zip(held_out_batches(val, 3, B, L, first=3), own))
    assert all(torch.equal(a, b) for a, b in zip(trainer.held_out(25)[:20], trainer.val_batches))
