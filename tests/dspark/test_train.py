import math

import pytest
import torch

from dspark.train import Trainer, load_target, save_target, train
from tests.conftest import TARGETS, is_timing_metric, target_overrides, tiny


def _strip(m):
    return {k: v for k, v in m.items() if not is_timing_metric(k)}


@pytest.mark.parametrize("kind", TARGETS)
def test_tiny_run_learns(corpus_dir, tmp_path, kind):
    reports = []
    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_steps=60, draft_steps=60,
               eval_interval=30, **target_overrides(kind))
    final = train(cfg, report=lambda m, c, items=None: reports.append((m, c)))
    draft = [m for m, _ in reports if "tf/tau" in m]
    assert draft[0]["step"] == 60  # the draft stage's step-0 evaluation, before any update
    assert draft[-1]["tf/tau"] > draft[0]["tf/tau"] + 0.2
    losses = [m["train/loss"] for m in draft if "train/loss" in m]
    assert losses[-1] < losses[0]
    assert final["tf/tau"] == draft[-1]["tf/tau"]
    for k in range(1, cfg.block_size + 1):
        assert 0.0 <= final[f"tf/accept@{k}"] <= 1.0
    assert all(math.isfinite(final[k]) for k in ("val/bpb", "tf/ce", "tf/tv", "tf/conf_ece",
                                                "tf/conf_brier", "tf/conf_auroc", "train/tokens_per_s"))
    # every report after a training step carries a checkpoint directory
    assert all(c is not None for m, c in reports if "train/loss" in m or "target/loss" in m)


def test_checkpoint_every_s_keeps_only_stage_ends_within_the_interval(corpus_dir, tmp_path):
    """A long interval skips the checkpoints at evaluations inside a stage; each stage's
    end and the final report still carry one, and the run ends with the same metrics."""
    kw = dict(data=(str(corpus_dir),), target_steps=40, draft_steps=40, eval_interval=10)
    every, sparse = [], []
    full = train(tiny(out_dir=str(tmp_path / "every"), **kw), report=lambda m, c, items=None: every.append((m["step"], c)))
    few = train(tiny(out_dir=str(tmp_path / "sparse"), checkpoint_every_s=1e6, **kw),
                report=lambda m, c, items=None: sparse.append((m["step"], c)))
    assert [s for s, c in every if c] == [10, 20, 30, 40, 50, 60, 70, 80, 80]
    assert [s for s, c in sparse if c] == [40, 80, 80]  # target end, draft end, final
    assert [s for s, _ in sparse] == [s for s, _ in every]  # every evaluation is still reported
    assert _strip(few) == _strip(full)


@pytest.mark.parametrize("kind", TARGETS)
def test_resume_ends_with_the_same_metrics(corpus_dir, tmp_path, kind):
    """One interrupted run, resumed from inside the target stage (step 30) and from inside
    the draft stage (step 90): both end bit for bit where the uninterrupted run ends, on
    either target."""
    import shutil

    kw = dict(data=(str(corpus_dir),), target_steps=60, draft_steps=60, eval_interval=30, **target_overrides(kind))
    full = train(tiny(out_dir=str(tmp_path / "full"), **kw))
    kept = {}

    class Stop(Exception):
        pass

    def report(m, c, items=None):
        if c is not None and int(m["step"]) in (30, 90):  # the trainer keeps one checkpoint folder: copy it
            kept[int(m["step"])] = shutil.copytree(c, tmp_path / f"at{int(m['step'])}")
            if int(m["step"]) == 90:
                raise Stop

    with pytest.raises(Stop):
        train(tiny(out_dir=str(tmp_path / "part"), **kw), report=report)
    for stop_at in (30, 90):
        resumed = train(tiny(out_dir=str(tmp_path / f"resumed{stop_at}"), **kw), resume_from=kept[stop_at])
        assert _strip(resumed) == _strip(full), stop_at


def test_non_finite_loss_names_the_step(corpus_dir, tmp_path):
    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_lr=1e30, warmup_steps=0, grad_clip=1e30)
    with pytest.raises(FloatingPointError, match=r"target loss is (nan|inf) at step \d+"):
        train(cfg)


@pytest.mark.parametrize("overrides", [
    dict(head="rnn"),
    dict(head="none", confidence_input="hidden"),
    dict(window="shifted", decay_gamma=4.0, confidence_input="hidden", anchors="strided", stride=8),
    dict(window="ids_only"),
    dict(parallel_stage="backbone", aux_weight=0.5),
])
@pytest.mark.parametrize("kind", TARGETS)
def test_every_arm_trains(corpus_dir, tmp_path, overrides, kind):
    """Every arm on either target; the backbone stage trains the byte LM itself, which an HF
    target (frozen, as DeepSpec keeps it) refuses in one line."""
    given = {**overrides, **target_overrides(kind)}
    if kind == "hf" and overrides.get("parallel_stage") == "backbone":
        with pytest.raises(ValueError, match="an HF target serves the drafter stage"):
            tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), **given)
        return
    final = train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), **given))
    assert math.isfinite(final["tf/tau"]) and final["tf/tau"] >= 1.0


def test_shared_target_is_loaded_not_retrained(corpus_dir, tmp_path):
    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "a"))
    t = Trainer(cfg)
    t.run()
    path = tmp_path / "target.pt"
    save_target(path, t.target, {"target_hash": t.target_hash})
    loaded, meta = load_target(path)
    assert meta["target_hash"] == t.target_hash
    for a, b in zip(loaded.state_dict().values(), t.target.state_dict().values()):
        assert torch.equal(a, b)
    reports = []
    train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "b"), target_path=str(path)),
          report=lambda m, c, items=None: reports.append(m))
    assert not any("target/loss" in m for m in reports)
    with pytest.raises(ValueError, match="target_path: .* holds a target of shape"):
        train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "c"), target_path=str(path), d_model=32))


def test_before_step_hook_hears_each_head_step_and_can_stop_the_run(corpus_dir, tmp_path):
    """The hook the sweeps' fault injection uses: called before every head-stage step with
    (step, resumed); what it raises ends the run."""
    seen = []

    def hook(step, resumed):
        seen.append((step, resumed))
        if step == 5:
            raise RuntimeError("injected crash at step 5")

    with pytest.raises(RuntimeError, match="injected crash at step 5"):
        train(tiny(data=(str(corpus_dir),), out_dir=str(tmp_path), target_steps=3), before_step=hook)
    assert seen == [(i, False) for i in range(6)]


def test_pure_ce_control_runs_no_head_and_logs_step_cost(corpus_dir, tmp_path):
    """Backbone stage, aux_weight 0: the LM trains on CE alone and no head runs, so its
    train/step_ms is the LM's own cost (the seed's "does the aux head earn its share")."""
    base = dict(data=(str(corpus_dir),), parallel_stage="backbone", head="rnn", block_size=4,
                anchors="strided", target_steps=10, eval_interval=5)
    trainer = Trainer(tiny(out_dir=str(tmp_path / "ce"), aux_weight=0.0, **base))
    before = {k: v.clone() for k, v in trainer.head.state_dict().items()}
    trainer.run()
    rows = [h for h in trainer.history if "train/loss" in h]
    assert rows and all(h["train/step_ms_sweep"] > 0 for h in rows)
    assert all("train/tv" not in h and h["train/loss"] == h["train/lm_ce"] for h in rows)
    assert all(torch.equal(before[k], v) for k, v in trainer.head.state_dict().items())  # untouched

    aux = Trainer(tiny(out_dir=str(tmp_path / "aux"), aux_weight=0.1, **base))
    aux.run()
    rows = [h for h in aux.history if "train/loss" in h]
    assert all(h["train/step_ms_sweep"] > 0 and "train/tv" in h for h in rows)
    assert all(h["train/loss"] > h["train/lm_ce"] for h in rows)  # CE_lm + 0.1 * L_dspark


def test_no_code_outside_the_trainer_calls_its_private_methods():
    """The benches, the GPU check and the shared-target task use the public stage functions."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    private = re.compile(r"(?<!self)\.(_train_target|_train_head|_anchors|_build_optimizer|_head_loss|"
                         r"_target_loss|_optimizer_step|_train_mode|_load_shared_target|_emit)\(")
    offenders = [f"{p.relative_to(root)}:{i}" for folder in ("dspark", "trials", "bench", "analysis")
                 for p in (root / folder).rglob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert offenders == []


def test_no_bench_takes_a_step_of_its_own_or_swaps_a_trainers_parts():
    """The benches time Trainer.step: none runs a backward pass or an optimizer of its own,
    or assigns a trainer's models, optimizer or stage (as aux_step once set trainer.target
    and models.head), so what they time is what a run trains with."""
    import re
    from pathlib import Path

    own = re.compile(r"\.backward\(|torch\.optim\.|\.(target|head|drafter|models|opt|sched|stage)(\.\w+)*\s*=(?!=)")
    root = Path(__file__).resolve().parents[2]
    offenders = [f"{p.relative_to(root)}:{i}" for p in sorted((root / "bench").glob("*.py"))
                 for i, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert offenders == []

def test_step_is_one_optimizer_update_on_the_batch_given(corpus_dir, tmp_path):
    """Trainer.step, which the stage loops run and the benches and the timing pass time: one
    optimizer update on the batch given, its loss parts as floats; it advances neither the
    stage's step count nor a data stream, and a head stage's step needs the block anchors."""
    from dspark.data import sample_batch

    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "b"), parallel_stage="backbone", head="rnn",
               block_size=4, anchors="strided", aux_weight=0.1, target_steps=10)
    trainer = Trainer(cfg)
    x = sample_batch(trainer.corpus.train, cfg.batch_size, cfg.seq_len + 1, torch.Generator().manual_seed(0))
    anchors = trainer.anchors(x.shape[0])
    before = {k: v.clone() for k, v in trainer.target.state_dict().items()}
    data = trainer.data_gen.get_state()
    out = trainer.step(x, anchors)
    assert set(out) == {"loss", "ce", "tv", "conf", "tau_tf", "lm_ce"} and all(type(v) is float for v in out.values())
    assert out["loss"] > out["lm_ce"]  # CE_lm + 0.1 * L_dspark
    assert any(not torch.equal(before[k], v) for k, v in trainer.target.state_dict().items())
    assert trainer.sched.last_epoch == 1 and trainer.stage_step == 0 and torch.equal(trainer.data_gen.get_state(), data)
    with pytest.raises(ValueError, match="the joint stage needs the batch's block anchors"):
        trainer.step(x)


def test_the_stage_loops_take_the_steps_trainer_step_takes(corpus_dir, tmp_path):
    """Both stage loops train through Trainer.step: a trainer of the same config that calls
    `step` itself on the same data streams ends with the same weights, bit for bit, and
    the statistics `step` returned are the ones the loops logged."""
    from dspark.data import sample_batch

    cfg = tiny(data=(str(corpus_dir),), out_dir=str(tmp_path / "loop"), target_steps=6, draft_steps=6,
               eval_interval=3)
    loop = Trainer(cfg)
    loop.train_target()
    loop.start_draft()
    loop.train_head()
    by_hand, stats = Trainer(cfg.replace(out_dir=str(tmp_path / "hand"))), []

    def steps(gen: torch.Generator, n: int) -> None:
        for _ in range(n):  # as the loops draw them: the batch, then (head stage) its anchors
            x = sample_batch(by_hand.corpus.train, cfg.batch_size, cfg.seq_len + 1, gen)
            stats.append(by_hand.step(x, None if by_hand.stage == "target" else by_hand.anchors(x.shape[0])))

    steps(by_hand.target_data_gen, cfg.target_steps)
    by_hand.start_draft()
    steps(by_hand.data_gen, cfg.draft_steps)
    for module in ("target", "head", "drafter"):
        mine, theirs = getattr(by_hand, module).state_dict(), getattr(loop, module).state_dict()
        assert all(torch.equal(mine[k], theirs[k]) for k in theirs), module
    assert set(stats[0]) == {"loss"} and set(stats[-1]) == {"loss", "ce", "tv", "conf", "tau_tf"}
    assert [h["target/loss"] for h in loop.history if "target/loss" in h] == [stats[2]["loss"], stats[5]["loss"]]
    logged = [h for h in loop.history if "train/loss" in h]
    assert [{k: h[f"train/{k}"] for k in stats[-1]} for h in logged] == [stats[8], stats[11]]


def test_a_run_resumed_mid_stage_reports_its_checkpoints_evaluation_first(corpus_dir, tmp_path):
    """A driver killed between a trial's report and its store write lost that point, and the
    resumed trial goes on from the step after it: the checkpoint's own evaluation is reported
    again first (a tracker logs each step once, so nothing is duplicated)."""
    kw = dict(data=(str(corpus_dir),), target_steps=20, draft_steps=60, eval_interval=20, checkpoint_every_s=0.0)
    first, ckpts = [], {}

    class Stop(Exception):
        pass

    def report(m, c, items=None):
        first.append(dict(m))
        if c is not None:
            ckpts[int(m["step"])] = c
            if len(ckpts) == 2:
                raise Stop

    with pytest.raises(Stop):
        train(tiny(out_dir=str(tmp_path / "part"), **kw), report=report)
    step = max(ckpts)
    again = []
    train(tiny(out_dir=str(tmp_path / "part"), **kw), resume_from=ckpts[step],
          report=lambda m, c, items=None: again.append((dict(m), c)))
    (lead, ckpt), later = again[0], [m for m, _ in again[1:]]
    assert lead == first[-1] and int(lead["step"]) == step and ckpt is None
    assert all(int(m["step"]) > step for m in later)
