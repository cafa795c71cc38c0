"""`trials reeval --eval-batches N` on real Ray and a real MLflow SQLite store: a backbone
sweep's held-out responses re-measured from each trial's checkpoint on more batches, with
their jackknife records, resumable, and applied to a block that `trials augment` adds."""

import re

import pytest
from mlflow.tracking import MlflowClient

from dspark.evaluate import lm_bpb
from dspark.train import Trainer
from trials import layout, runner, saved, validate
from trials.augment import augment
from trials.cli import main
from trials.reeval import reeval
from trials.store.keys import reeval_tag
from trials.store.reader import run_items
from tests.trials.conftest import write_spec

BACKBONE = {"parallel_stage": "backbone", "target_steps": 4, "eval_interval": 2, "eval_batches": 2,
            "spec_prompts": 0, "seq_len": 64, "max_corpus_bytes": 300_000}


def trials_of(uri, name):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    return [r for r in c.search_runs([exp.experiment_id], "", max_results=1000) if "trial_key" in r.data.tags]


def test_counts_are_refused_in_one_line_before_anything_loads(capsys):
    for counts, says in [({"eval_batches": 1}, "--eval-batches: an integer >= 2, got 1"),
                         ({"eval_batches": 2.5}, "--eval-batches: an integer >= 2, got 2.5"),
                         ({"eval_batches": 4, "spec_prompts": 0}, "--spec-prompts: an integer >= 2, got 0")]:
        with pytest.raises(ValueError, match="^" + re.escape(says) + "$"):
            reeval("no-such-sweep", "/nonexistent", counts)  # refused before the storage is read
    with pytest.raises(SystemExit):
        main(["reeval", "x", "--eval-batches", "four"])
    assert "--eval-batches: invalid int value: 'four'" in capsys.readouterr().err
    for argv, says in [(["--eval-batches"], "argument --eval-batches: expected one argument"),
                       (["--eval-batches", "3", "--eval-batches=4"], "argument --eval-batches: given twice"),
                       (["--verbose", "--storage", "s"], "argument --verbose: expected one argument")]:
        with pytest.raises(SystemExit):
            main(["reeval", "x", *argv])
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"trials reeval: error: {says}"


def test_the_command_line_takes_counts_around_its_own_options_abbreviated_too():
    import argparse

    from trials.cli import build_parser, count_flags

    rv = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["reeval"]
    assert count_flags(rv, ["--spec-prompts", "96", "x", "--stor", "d", "--eval-batches=8", "--tracking-uri=u"]) == (
        ["x", "--stor", "d", "--tracking-uri=u"], [("spec_prompts", 96), ("eval_batches", 8)])


def test_the_counts_are_the_workloads_and_named_from_it(tmp_path, corpus_dir, capsys):
    """No count, or one the workload does not count, is refused in one line naming the
    workload's own counts, whichever side of the sweep's name the flags stand."""
    _, storage, _ = _finished_without_ray(tmp_path, corpus_dir)
    capsys.readouterr()
    for argv, says in [(["fin"], "reeval: give --spec-prompts N, --eval-batches N, or both"),
                       (["--spec-promts", "8", "fin"], "reeval: --spec-promts: workload 'dspark' counts no such items "
                                                       "(its counts: --spec-prompts, --eval-batches)"),
                       # bounded by what the workload declares (10**12 once filled a worker's memory in 10 s)
                       (["fin", "--spec-prompts", str(10 ** 12)], "reeval: --spec-prompts: at most 4096 (workload "
                                                                 f"'dspark''s limit for its prompts), got {10 ** 12}")]:
        assert main(["reeval", *argv, "--storage", storage]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"trials: error: {says}"]


def _finished_without_ray(tmp_path, corpus_dir, name="fin"):
    """A backbone sweep as storage and the store hold it once finished, made without Ray: its
    files saved as `trials run` saves them, its runs FINISHED through the trials' Ledger, and
    in each trial's folder a checkpoint whose bytes match their checksum but are no torch file
    (what a copy from another tool, or an altered file with its checksum redone, looks like)."""
    import hashlib

    from dspark.checkpoint import CHECKSUM_FILE
    from trials.saved import save_sweep_files
    from trials.tracking import open_ledger

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, name, {"D1": {
        "a": {"window": "shifted"}, "b": {"window": "aligned"}}}, base=BACKBONE))
    exp_dir = tmp_path / "st" / name
    exp_dir.mkdir(parents=True)
    save_sweep_files(exp_dir, spec, uri, None)
    ledger = open_ledger(uri, spec)
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {})
        ledger.log_metrics(run_id, {"val/bpb": 2.0, "tf/tau": 1.5}, step=4)
        ledger.finish(run_id, "FINISHED")
        ckpt = exp_dir / f"trial_{hashlib.sha256(t.key.encode()).hexdigest()[:10]}" / "checkpoint_000000"
        ckpt.mkdir(parents=True)
        (ckpt / "state.pt").write_bytes(b"not a torch file")
        (ckpt / CHECKSUM_FILE).write_text(hashlib.sha256(b"not a torch file").hexdigest())
    ledger.finish(ledger.parent_id, "FINISHED")
    return spec, str(tmp_path / "st"), exp_dir


def test_an_unreadable_checkpoint_is_named_before_ray_starts_and_nothing_is_said(tmp_path, corpus_dir, capsys):
    """It was found by the Ray task, after Ray had started and "re-evaluating 2 trial(s)" was
    printed, as the task's remote traceback with ANSI codes prefixed "resume:"."""
    import ray

    spec, storage, exp_dir = _finished_without_ray(tmp_path, corpus_dir)
    said = []
    with pytest.raises(ValueError) as e:
        reeval("fin", storage, {"eval_batches": 4}, say=said.append)
    first = next(t for t in spec.trials if t.key in str(e.value))
    assert str(e.value).startswith(f"reeval: trial {first.key}: {exp_dir}/trial_") and \
        "/checkpoint_000000/state.pt is not a dspark checkpoint (" in str(e.value)
    assert said == [] and not ray.is_initialized() and not (exp_dir / "driver.lease").exists()
    capsys.readouterr()  # MLflow's lines from making the store
    assert main(["reeval", "fin", "--eval-batches", "4", "--storage", storage]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.strip().splitlines() == [f"trials: error: {e.value}"]


def test_a_refused_reeval_names_the_command_that_holds_the_sweep_and_says_nothing_first(tmp_path, corpus_dir,
                                                                                      capsys):
    """A `trials augment` driving the sweep (its Tune run stood in for by a wait) holds the
    lease with its own command: reeval named `trials resume` instead, after printing
    "re-evaluating N trial(s)"."""
    import os
    import subprocess
    import sys

    _, storage, exp_dir = _finished_without_ray(tmp_path, corpus_dir)
    code = ("import sys, time\nfrom trials import runner\n"
            "runner._run_leased = lambda *a, **k: (print('holding', flush=True), time.sleep(120))\n"
            "from trials.cli import main\nsys.exit(main(sys.argv[1:]))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    holder = subprocess.Popen([sys.executable, "-c", code, "augment", "fin", "--replicates", "1", "--storage", storage],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": root})
    try:
        assert holder.stdout.readline().strip() == "holding", holder.stderr.read()[-2000:]
        capsys.readouterr()  # MLflow's lines from making the store
        assert main(["reeval", "fin", "--eval-batches", "4", "--storage", storage]) == 2
        out = capsys.readouterr()
        assert out.out == "", out.out
        err = out.err.strip().splitlines()
        assert len(err) == 1 and f"sweep 'fin' is driven by pid {holder.pid}" in err[0], err
        assert "(`trials augment fin --replicates 1`, since " in err[0] and "trials resume" not in err[0], err
    finally:
        holder.kill()
        holder.wait()


def test_eval_batches_remeasure_a_backbone_sweep_and_resume(ray_local, tmp_path, corpus_dir, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "bb", {"D1": {
        "a": {"window": "shifted"}, "b": {"window": "aligned"}}}, base=BACKBONE, replicates=2))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    before = {r.data.tags["trial_key"]: r.data.metrics["val/bpb"] for r in trials_of(uri, "bb")}
    with pytest.raises(ValueError, match="backbone-stage trials, which decode nothing"):
        reeval("bb", storage, {"spec_prompts": 4, "eval_batches": 4})
    said = []
    assert reeval("bb", storage, {"eval_batches": 4}, say=said.append) == {"done": 4, "skipped": 0, "refused": []}
    assert said[0] == "bb: re-evaluating 4 trial(s) with 4 held-out batches (0 already done)"
    client = MlflowClient(uri)
    for r in trials_of(uri, "bb"):
        m, run_id, items = r.data.metrics, r.info.run_id, run_items(client, r)
        assert r.data.tags[reeval_tag("eval_batches")] == "4" and items["split/eval_batches"] == 4.0
        history = client.get_metric_history(run_id, "val/bpb")
        assert history[-1].value == m["val/bpb"] and history[-2].value == before[r.data.tags["trial_key"]]
        assert history[-2].step < history[-1].step and m["val/bpb"] != history[-2].value
        # the items are the run's artifact, not metrics: the new evaluation's groups replaced the old 2
        assert not any(k.startswith(("jack/", "split/")) for k in m)
        for resp in ("val/bpb", "tf/tau", "tf/conf_ece"):
            assert {f"jack/{resp}@g{g}" for g in range(4)} <= set(items) and f"jack/{resp}@g4" not in items
    _check_against_the_checkpoint(spec, storage, trials_of(uri, "bb"), client)
    # resumable: the same count again evaluates nothing; the CLI passes the flag through
    assert main(["reeval", "bb", "--eval-batches", "4", "--storage", storage]) == 0
    assert "0 trial(s) re-evaluated (--eval-batches 4), 4 already were" in capsys.readouterr().out
    # a block added afterwards is evaluated like the rest: no look mixes 2 and 4 batches
    augment("bb", storage, uri, replicates=1)
    from analysis.sweep_reader import load_runs

    df = load_runs("bb", uri).runs
    assert len(df) == 6 and set(df["split/eval_batches"]) == {4.0} and "jack/val/bpb@g3" in df.columns


def _check_against_the_checkpoint(spec, storage, runs, client):
    """One run's new val/bpb and a jack value, computed directly from its final checkpoint."""
    root = saved.storage_root(storage)
    trial = next(t for t in spec.trials if t.replicate == 1)
    ckpt = layout.latest_checkpoints(root / spec.name, [trial], spec.wl)[trial.key]
    run = next(r for r in runs if r.data.tags["trial_key"] == trial.key)
    trainer = Trainer(trial.config.replace(out_dir=str(root / "direct")).native())
    trainer.load_checkpoint(ckpt)
    batches = trainer.held_out(4)
    assert all((a == b).all() for a, b in zip(batches[:2], trainer.val_batches))  # the trial's own first
    bpb = lm_bpb(trainer.target, batches, trainer.device, trainer.autocast)
    assert run.data.metrics["val/bpb"] == pytest.approx(bpb, rel=1e-6)
    without_1 = lm_bpb(trainer.target, [batches[i] for i in (0, 2, 3)], trainer.device, trainer.autocast)
    assert run_items(client, run)["jack/val/bpb@g1"] == pytest.approx(without_1, rel=1e-6)


def test_a_reevaluation_that_raises_or_returns_no_numbers_records_nothing_and_says_which(ray_local):
    """The workload's `reevaluate` raising is one line naming the run and the error (it was a
    41-line traceback naming no trial); text, NaN or a mapping of no numbers records nothing
    (it used to tag the run with the new count beside its old evaluation, so a rerun skipped
    it); numpy numbers and 0-d tensors are numbers."""
    import numpy as np
    import ray
    import torch

    from trials.reeval import _result, plain_numbers

    @ray.remote(max_retries=1)
    def boom():
        raise KeyError("prompts")

    with pytest.raises(ValueError) as e:
        _result(boom.remote(), "D1=aligned r2")
    assert str(e.value).startswith("reeval: D1=aligned r2: the workload's reevaluate raised KeyError: ")
    assert len(str(e.value).splitlines()) == 1 and "prompts" in str(e.value)
    assert plain_numbers({"val/loss": np.float32(1.5), "spec/tau": torch.tensor(2.0)}) == (
        {"val/loss": 1.5, "spec/tau": 2.0}, None)
    assert plain_numbers({"val/loss": 1.0, "conf/auroc@1": float("nan")}, ["val/loss"])[1] is None  # degenerate here
    for bad, said in [({"val/loss": float("nan")}, "val/loss = 'nan' is not a finite number"),
                      ({"val/loss": "1.2"}, "val/loss = '1.2' is not a finite number"),
                      ("done", "reevaluate returned 'done', not a mapping of metric names to numbers"),
                      ({}, "not a mapping of metric names to numbers")]:
        got, problem = plain_numbers(bad, ["val/loss"])
        assert got == {} and said in problem, (bad, problem)
