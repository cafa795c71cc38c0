"""`trials reeval --eval-batches N` on real Ray and a real MLflow SQLite store: a backbone
sweep's held-out responses re-measured from each trial's checkpoint on more batches, with
their jackknife records, resumable, and applied to a block that `trials augment` adds."""

import re

import pytest
from mlflow.tracking import MlflowClient

from dspark.evaluate import lm_bpb
from dspark.train import Trainer
from trials import runner, spec as specmod
from trials.augment import augment
from trials.cli import main
from trials.reeval import BATCHES_TAG, reeval
from tests.trials.conftest import write_spec

BACKBONE = {"parallel_stage": "backbone", "target_steps": 4, "eval_interval": 2, "eval_batches": 2,
            "spec_prompts": 0, "seq_len": 64, "max_corpus_bytes": 300_000}


def trials_of(uri, name):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    return [r for r in c.search_runs([exp.experiment_id], "", max_results=1000) if "trial_key" in r.data.tags]


def test_counts_are_refused_in_one_line_before_anything_loads(capsys):
    for kwargs, says in [({}, "reeval: give --spec-prompts N, --eval-batches N, or both"),
                         ({"eval_batches": 1}, "--eval-batches: an integer >= 2, got 1"),
                         ({"eval_batches": 2.5}, "--eval-batches: an integer >= 2, got 2.5"),
                         ({"eval_batches": 4, "spec_prompts": 0}, "--spec-prompts: an integer >= 2, got 0")]:
        with pytest.raises(ValueError, match="^" + re.escape(says) + "$"):
            reeval("no-such-sweep", "/nonexistent", **kwargs)  # refused before the storage is read
    assert main(["reeval", "x", "--storage", "/nonexistent"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "trials: error: reeval: give --spec-prompts N, --eval-batches N, or both"]
    with pytest.raises(SystemExit):
        main(["reeval", "x", "--eval-batches", "four"])
    assert "--eval-batches: invalid int value: 'four'" in capsys.readouterr().err


def test_eval_batches_remeasure_a_backbone_sweep_and_resume(ray_local, tmp_path, corpus_dir, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = specmod.load(write_spec(tmp_path / "s.yaml", corpus_dir, "bb", {"D1": {
        "a": {"window": "shifted"}, "b": {"window": "aligned"}}}, base=BACKBONE, replicates=2))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    before = {r.data.tags["trial_key"]: r.data.metrics["val/bpb"] for r in trials_of(uri, "bb")}
    with pytest.raises(ValueError, match="backbone-stage trials, which decode nothing"):
        reeval("bb", storage, 4, eval_batches=4)
    said = []
    assert reeval("bb", storage, eval_batches=4, say=said.append) == {"done": 4, "skipped": 0}
    assert said[0] == "bb: re-evaluating 4 trial(s) with 4 held-out batches (0 already done)"
    client = MlflowClient(uri)
    for r in trials_of(uri, "bb"):
        m, run_id = r.data.metrics, r.info.run_id
        assert r.data.tags[BATCHES_TAG] == "4" and m["split/eval_batches"] == 4.0
        history = client.get_metric_history(run_id, "val/bpb")
        assert history[-1].value == m["val/bpb"] and history[-2].value == before[r.data.tags["trial_key"]]
        assert history[-2].step < history[-1].step and m["val/bpb"] != history[-2].value
        assert [h.value for h in client.get_metric_history(run_id, "split/eval_batches")][-2:] == [2.0, 4.0]
        for resp in ("val/bpb", "tf/tau", "tf/conf_ece"):
            assert {f"jack/{resp}:g{g}" for g in range(4)} <= set(m)
            assert client.get_metric_history(run_id, f"jack/{resp}:g3")[-1].step == history[-1].step
        assert "jack/val/bpb:g4" not in m
    _check_against_the_checkpoint(spec, storage, trials_of(uri, "bb"))
    # resumable: the same count again evaluates nothing; the CLI passes the flag through
    assert main(["reeval", "bb", "--eval-batches", "4", "--storage", storage]) == 0
    assert "0 trial(s) re-evaluated (--eval-batches 4), 4 already were" in capsys.readouterr().out
    # a block added afterwards is evaluated like the rest: no look mixes 2 and 4 batches
    augment("bb", storage, uri, replicates=1)
    from analysis.load import load_runs

    df = load_runs("bb", uri)
    assert len(df) == 6 and set(df["split/eval_batches"]) == {4.0} and "jack/val/bpb@g3" in df.columns


def _check_against_the_checkpoint(spec, storage, runs):
    """One run's new val/bpb and a jack value, computed directly from its final checkpoint."""
    root = runner.storage_root(storage)
    trial = next(t for t in spec.trials if t.replicate == 1)
    ckpt = runner.latest_checkpoints(root / spec.name, [trial])[trial.key]
    run = next(r for r in runs if r.data.tags["trial_key"] == trial.key)
    trainer = Trainer(trial.config.replace(out_dir=str(root / "direct")))
    trainer.load_checkpoint(ckpt)
    batches = trainer.held_out(4)
    assert all((a == b).all() for a, b in zip(batches[:2], trainer.val_batches))  # the trial's own first
    bpb = lm_bpb(trainer.target, batches, trainer.device, trainer.autocast)
    assert run.data.metrics["val/bpb"] == pytest.approx(bpb, rel=1e-6)
    without_1 = lm_bpb(trainer.target, [batches[i] for i in (0, 2, 3)], trainer.device, trainer.autocast)
    assert run.data.metrics["jack/val/bpb:g1"] == pytest.approx(without_1, rel=1e-6)
