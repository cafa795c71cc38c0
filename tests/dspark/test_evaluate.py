"""The teacher-forced evaluation's items (each response without each group of held-out
batches, as `report(..., items=)` takes them) and the held-out batches a longer evaluation
draws: each value left is the response recomputed directly on the batches left after
deleting one group."""

import math

import pytest
import torch

from dspark import calibration
from dspark.data import fixed_batches, held_out_batches
from dspark.evaluate import JACK_RESPONSES, lm_bpb, teacher_forced
from dspark.metrics import JACK_GROUPS
from dspark.train import Trainer, train
from tests.conftest import TARGETS, target_overrides, tiny


@pytest.fixture(scope="module", params=TARGETS)
def trainer(request, corpus_dir, tmp_path_factory):
    """An untrained drafter-stage trainer (the identities below hold for any weights), on
    the byte LM and on the HF target."""
    torch.manual_seed(0)
    t = Trainer(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path_factory.mktemp("ev")), eval_batches=20,
                     **target_overrides(request.param)))
    t.target.eval()
    t.head.eval()
    t.drafter.eval()
    return t


def _evaluate(t, batches, final=True):
    """(metrics, items)."""
    return teacher_forced(t.models, batches, t.cfg.stride, t.device, t.autocast, jackknife_groups=final)


def _kept(batches, G, g):
    return [b for i, b in enumerate(batches) if i % G != g]


def test_jack_bpb_is_the_bpb_of_the_batches_left(trainer):
    batches = trainer.val_batches  # 20 batches: G = 16, groups 0..3 hold two batches each
    m, items = _evaluate(trainer, batches)
    assert m["split/eval_batches"] == 20.0 and items["val/bpb"]["items"] == 20
    assert m["val/bpb"] == pytest.approx(lm_bpb(trainer.target, batches, trainer.device, trainer.autocast))
    values = []
    for g in range(JACK_GROUPS):
        direct = lm_bpb(trainer.target, _kept(batches, JACK_GROUPS, g), trainer.device, trainer.autocast)
        assert items["val/bpb"]["without"][g] == pytest.approx(direct, rel=1e-9), g
        values.append(direct)
    assert len(set(values)) == JACK_GROUPS  # each deletion changes the value: no group is empty
    assert len(items["val/bpb"]["without"]) == JACK_GROUPS


def test_jack_calibration_and_tau_are_recomputed_without_the_group(trainer):
    batches = trainer.val_batches[:6]  # G = 6
    m, items = _evaluate(trainer, batches)
    for g in range(6):
        kept = _kept(batches, 6, g)
        again, none = _evaluate(trainer, kept, final=False)  # the whole evaluation, run on the kept batches
        assert none == {}
        for r in JACK_RESPONSES:
            assert items[r]["without"][g] == pytest.approx(again[r], rel=1e-9), (r, g)
        # and ECE straight from the kept batches' pooled predictions, through dspark.calibration
        pred, label = _predictions(trainer, kept)
        assert items["tf/conf_ece"]["without"][g] == pytest.approx(calibration.ece(pred, label), rel=1e-6)
        assert items["tf/conf_ece"]["without"][g] != m["tf/conf_ece"]


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
    m, items = _evaluate(trainer, trainer.val_batches[:n])
    assert set(items) == (set(JACK_RESPONSES) if groups else set())
    for r, given in items.items():
        assert given["items"] == n and len(given["without"]) == groups
        assert all(math.isfinite(v) for v in given["without"])
    assert not any(k.startswith(("jack/", "split/")) and k != "split/eval_batches" for k in m)  # no names
    assert m["split/eval_batches"] == float(n)
    assert _evaluate(trainer, trainer.val_batches[:n], final=False)[1] == {}


def test_only_the_final_evaluation_of_a_run_reports_its_items(corpus_dir, tmp_path):
    """The items go with `report(metrics, checkpoint_dir, items=...)`, in the form the engine
    takes (`trials.store.items.encode` accepts them); the metrics carry no item names."""
    from trials.store.items import encode

    reports = []
    final = train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_steps=4, draft_steps=4,
                       eval_interval=2, eval_batches=3),
                  report=lambda m, c, items=None: reports.append((m, items)))
    with_items = [m["step"] for m, items in reports if items]
    assert with_items == [8, 8]  # the stage's last evaluation, and the final report repeating it
    assert [m["step"] for m, items in reports if "tf/tau" in m and m["step"] < 8] == [4, 6]  # intermediate: none
    m, items = reports[-1]
    assert len(items["tf/tau"]["without"]) == 3 and items["tf/tau"]["items"] == 3
    assert encode(items, m)["jack/tf/tau@g2"] == items["tf/tau"]["without"][2]
    assert not any(k.startswith("jack/") for k, _ in final.items()) and final["split/eval_batches"] == 3.0
    again = []  # resumed from the final checkpoint: the final report again, with its items
    train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_steps=4, draft_steps=4, eval_interval=2,
               eval_batches=3), resume_from=str(tmp_path / "checkpoint"),
          report=lambda m, c, items=None: again.append((m, items)))
    assert again == [reports[-1]]


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
