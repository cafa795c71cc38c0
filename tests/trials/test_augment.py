"""`trials augment` on real Ray and MLflow: added blocks, looks until decided, and an
interrupted augment that continues where it stopped."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from trials import expand, runner, saved, spec as specmod, validate
from trials.augment import augment
from trials.store.reader import run_items
from tests.trials.conftest import D1_D9, write_spec

ROOT = Path(__file__).resolve().parents[2]
QUICK = {"target_steps": 8, "draft_steps": 6, "eval_interval": 3, "eval_batches": 1, "spec_prompts": 2,
         "spec_new_tokens": 16, "spec_prompt_len": 16, "max_corpus_bytes": 300_000, "spec_interval_prompts": 0}
PRIMARY = {"tf/tau": {"better": "higher", "margin": 0.001}}


def kids(uri, name):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    runs = c.search_runs([exp.experiment_id], "", max_results=1000)
    parent = next(r for r in runs if r.data.tags.get("sweep_parent") == "true")
    return parent, [r for r in runs if "trial_key" in r.data.tags]


def test_augment_adds_blocks_with_new_seeds_and_order_rerunning_nothing(ray_local, tmp_path, corpus_dir):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "aug", D1_D9, base=QUICK, responses=PRIMARY))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    _, before = kids(uri, "aug")
    ended = {r.data.tags["trial_key"]: r.info.end_time for r in before}
    out = augment("aug", storage, replicates=1)
    assert out["ok"] and out["replicates"] == 2
    parent, after = kids(uri, "aug")
    assert len(after) == 8 and len({r.data.tags["trial_key"] for r in after}) == 8
    assert all(r.info.status == "FINISHED" for r in after)
    for r in after:  # the first block was not run again
        if r.data.tags["trial_key"] in ended:
            assert r.info.end_time == ended[r.data.tags["trial_key"]]
    new = [r for r in after if r.data.tags["replicate"] == "1"]
    assert {int(r.data.tags["seed"]) for r in new} == {specmod.replicate_seed("aug", 1)}
    assert sorted(int(r.data.tags["run_order"]) for r in new) == [4, 5, 6, 7]
    kept, _ = saved.load_saved("aug", storage)
    assert kept.replicates == 2 and kept.responses == {"tf/tau": {"better": "higher", "margin": 0.001}}
    with pytest.raises(ValueError, match="--replicates N, or --until-decided"):
        augment("aug", storage)
    # the unchanged spec file run again after the augment: the grown sweep, nothing rerun, its blocks kept
    again = runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    assert again["finished"] == 8
    assert saved.load_saved("aug", storage)[0].replicates == 2
    _, rerun = kids(uri, "aug")
    assert {r.data.tags["trial_key"]: r.info.end_time for r in rerun} == {
        r.data.tags["trial_key"]: r.info.end_time for r in after}
    with pytest.raises(ValueError, match="fewer than the sweep's 2 blocks"):
        augment("aug", storage, until_decided=True, max_replicates=1)


def test_augment_until_decided_records_each_look_on_the_parent(ray_local, tmp_path, corpus_dir):
    """From one block to the plan's maximum of two. One block may or may not be analysable
    (with no replicate the interaction is pooled into the residual, and an exact fit leaves
    none); either way one block is added, every look is recorded on the parent, and the
    looks spend at most the sweep's alpha between them, each the spending rule's share."""
    from analysis.sequential import spent

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "look", D1_D9, base=QUICK, responses=PRIMARY))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    said = []
    out = augment("look", storage, until_decided=True, max_replicates=2, say=said.append)
    looks = [x.replicates for x in out["looks"]]
    assert looks in ([1, 2], [2], [1]), said  # [1]: decided at the first look, so no block was added
    assert out["ok"] and out["replicates"] == looks[-1], said
    parent, runs = kids(uri, "look")
    assert len(runs) == 4 * out["replicates"]
    plan = json.loads(parent.data.tags["sequential"])
    assert [lk["blocks"] for lk in plan["looks"]] == looks and plan["max_replicates"] == 2
    assert plan["declared"] and not plan["post_hoc"]  # made by augment before the first look
    recorded = [json.loads(parent.data.tags[f"look.{k + 1}"]) for k in range(len(looks))]
    shares, before = [], 0.0
    for n in looks:
        shares.append(spent(n / 2, 0.05) - before)
        before = spent(n / 2, 0.05)
    assert [r["alpha"] for r in recorded] == pytest.approx(shares) and sum(shares) <= 0.05 + 1e-12
    assert all(sum(r["counts"].values()) >= 2 for r in recorded)  # every term of tf/tau has a verdict
    assert recorded[-1]["action"].startswith("stop: ") and said[-1].startswith("look: look at ")
    history = MlflowClient(uri).get_metric_history(parent.info.run_id, "augment/undecided")
    assert sorted(m.step for m in history) == list(range(1, len(looks) + 1))
    # the report reads the plan: the current look's alpha, said in the summary
    from analysis.sweep_reader import load_runs
    from analysis.report import build_report

    rep = build_report(load_runs("look", uri), None, responses=["tf/tau"])
    assert f"look {len(looks)} of a plan of at most 2 blocks" in rep.summary and not rep.look.new
    # the family's alpha over the whole plan; its looks spent the shares above
    assert rep.decision.alpha == 0.05 and rep.look.plan.spent_alpha() == pytest.approx(sum(shares))
    with pytest.raises(ValueError, match="plan allows 2 blocks"):
        augment("look", storage, until_decided=True, max_replicates=5)


def test_a_plan_added_after_a_look_is_post_hoc_and_refused_unless_asked():
    from analysis.sequential import Plan, plan_of

    from analysis.until_decided import plan_for as _plan

    fixed = plan_of("", 0.05)
    fixed.look("abc", 2, {"prompts": 32})  # the sweep was analysed once without a plan
    tags = {"sequential": fixed.to_json()}
    with pytest.raises(ValueError, match="a plan added now is post hoc: rerun with --post-hoc"):
        _plan(tags, 2, 6, 0.05, post_hoc=False)
    late = _plan(tags, 2, 6, 0.05, post_hoc=True)
    assert not late.declared and "added by trials augment --post-hoc after 1 look(s)" in late.post_hoc
    look, _ = late.look("def", 3, {"prompts": 32}, 0.5)
    assert look.post_hoc and Plan.from_json(late.to_json()).post_hoc == late.post_hoc
    fresh = _plan({}, 2, None, 0.05, post_hoc=False)  # no look yet: a plan made now is declared
    assert fresh.declared and fresh.max_replicates == 6
    declared = {"sequential": Plan(4, 0.05).to_json()}
    with pytest.raises(ValueError, match="--alpha"):
        _plan(declared, 2, None, 0.1, post_hoc=False)


def test_an_interrupted_augment_continues_where_it_stopped(tmp_path, corpus_dir):
    """SIGTERM to the augment's driver while its new block has a finished and a running trial
    (two cells, one at a time): the same command again finishes the block, rerunning nothing
    and logging no point twice."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    base = {**QUICK, "draft_steps": 40, "eval_interval": 10}
    spec_path = write_spec(tmp_path / "s.yaml", corpus_dir, "cut", {"D1": D1_D9["D1"]}, base=base,
                           responses=PRIMARY, max_concurrent=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-m", "trials.cli", "run", str(spec_path), "--tracking-uri", uri,
                            "--storage", storage], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    cmd = [sys.executable, "-m", "trials.cli", "augment", "cut", "--until-decided", "--max-replicates", "2",
           "--storage", storage]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:  # wait until the new block has a finished and a running trial
        time.sleep(1)
        assert proc.poll() is None, "the augment ended before its block had a finished and a running trial"
        _, runs = kids(uri, "cut")
        new = [r for r in runs if r.data.tags["replicate"] == "1"]
        if any(r.info.status == "FINISHED" for r in new) and any(r.info.status == "RUNNING" for r in new):
            break
    else:
        pytest.fail("the added block never had a finished and a running trial")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    assert "trials augment cut --until-decided" in proc.stderr.read()
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    parent, runs = kids(uri, "cut")
    assert len(runs) == 4 and len({r.data.tags["trial_key"] for r in runs}) == 4
    assert all(r.info.status == "FINISHED" for r in runs)
    assert json.loads(parent.data.tags["sequential"])["looks"][-1]["blocks"] == 2
    client = MlflowClient(uri)
    for r in runs:  # no metric point logged twice
        for key in r.data.metrics:
            steps = [m.step for m in client.get_metric_history(r.info.run_id, key)]
            assert len(steps) == len(set(steps)), (r.data.tags["trial_key"], key, steps)


def test_reeval_logs_a_new_evaluation_with_more_prompts_and_resumes(ray_local, tmp_path, corpus_dir):
    from trials.reeval import reeval
    from trials.store.keys import reeval_tag

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "again", D1_D9, base=QUICK, responses=PRIMARY))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    _, before = kids(uri, "again")
    client = MlflowClient(uri)
    old = {r.data.tags["trial_key"]: (r.data.metrics["spec/tau"], run_items(client, r)["split/prompts"]) for r in before}
    assert {p for _, p in old.values()} == {2.0}
    said = []
    out = reeval("again", storage, {"spec_prompts": 6}, say=said.append)
    assert out == {"done": 4, "skipped": 0, "refused": []}
    _, after = kids(uri, "again")
    for r in after:
        assert r.data.tags[reeval_tag("spec_prompts")] == "6" and run_items(client, r)["split/prompts"] == 6.0
        history = client.get_metric_history(r.info.run_id, "spec/tau")
        assert len(history) == 2 and history[0].step < history[1].step  # the old evaluation kept apart
        assert history[0].value == old[r.data.tags["trial_key"]][0]
        assert {a.path for a in client.list_artifacts(r.info.run_id, "eval")} == {"eval/per_prompt_6.json",
                                                                                  "eval/rounds_6.npz"}
        assert r.info.status == "FINISHED"
    # the analysis reads the new evaluation, with its prompt groups
    from analysis.sweep_reader import load_runs

    df = load_runs("again", uri).runs
    # the new evaluation's jackknife groups: G = min(6 prompts, 16), and no split/ groups any more
    assert set(df["split/prompts"]) == {6.0} and "jack/spec/tau@g5" in df.columns and "jack/spec/tau@g6" not in df
    assert "split/spec/tau@g3" not in df.columns
    assert reeval("again", storage, {"spec_prompts": 6}, say=said.append) == {"done": 0, "skipped": 4, "refused": []}  # resumable: nothing again
    with pytest.raises(ValueError, match="--spec-prompts"):
        reeval("again", storage, {"spec_prompts": 1})
    # a block added after a reeval is evaluated like the rest: no look mixes 2 and 6 prompts
    from trials.augment import augment

    augment("again", storage, uri, replicates=1)
    df = load_runs("again", uri).runs
    assert len(df) == 8 and set(df["split/prompts"]) == {6.0}
    import shutil

    for d in (tmp_path / "st" / "again").glob("*/checkpoint_*"):
        shutil.rmtree(d)
    with pytest.raises(ValueError, match="have no checkpoint"):
        reeval("again", storage, {"spec_prompts": 8})


def test_an_augment_interrupted_before_its_block_was_evaluated_evaluates_it_on_the_next_run(tmp_path):
    """What `until_decided` checks after finishing an interrupted block: runs that differ in
    their re-evaluation counts, or that lack the sweep's last timing pass."""
    from trials.timing.block_evaluation import unevenly_measured
    from trials.store.keys import PASS_TAG, SUMMARY_TAG, reeval_tag
    from trials.tracking import open_ledger

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec = validate.parse({"name": "uneven", "base": {"preset": "tiny", "parallel_stage": "backbone"},
                          "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}},
                          "replicates": 2})
    ledger = open_ledger(uri, spec)
    ids = []
    for t in spec.trials:
        run_id, _ = ledger.open_child(t, {})
        ledger.finish(run_id, "FINISHED")
        ids.append(run_id)
    client = MlflowClient(uri)
    assert not unevenly_measured(spec, uri)
    for run_id in ids[:2]:  # the first block was re-evaluated, the second not yet
        client.set_tag(run_id, reeval_tag("eval_batches"), "32")
    assert unevenly_measured(spec, uri)
    for run_id in ids[2:]:
        client.set_tag(run_id, reeval_tag("eval_batches"), "32")
    assert not unevenly_measured(spec, uri)
    client.set_tag(ledger.parent_id, SUMMARY_TAG, json.dumps({"id": "p2"}))
    for run_id in ids[:3]:
        client.set_tag(run_id, PASS_TAG, "p2")
    assert unevenly_measured(spec, uri)  # one run was not in the last timing pass
    client.set_tag(ids[3], PASS_TAG, "p2")
    assert not unevenly_measured(spec, uri)


BACKBONE = {"parallel_stage": "backbone", "target_steps": 4, "eval_interval": 2, "eval_batches": 1,
            "spec_prompts": 0, "seq_len": 64, "max_corpus_bytes": 300_000}


def test_an_augment_killed_after_its_blocks_first_trial_continues_to_its_target_not_beyond(ray_local, tmp_path,
                                                                                            corpus_dir):
    """Once: kill -9 of `augment --replicates 1` after the new block's first trial, then the
    same command: 4 blocks (16 trials of a 2 x 2 sweep instead of 12) and "added 1 block".
    Storage and store are made as the killed command left them, without Ray: the spec saved
    with 3 blocks, its target recorded, blocks 0 and 1 and the new block's first trial
    FINISHED. The rerun trains the one trial left (real Ray) and stops at 3 blocks."""
    from trials.augment import TARGET_FILE
    from trials.driver.identity import identity_tags
    from trials.tracking import open_ledger

    uri, root = f"sqlite:///{tmp_path / 'm.db'}", (tmp_path / "st").resolve()
    path = write_spec(tmp_path / "s.yaml", corpus_dir, "grow", {"D1": D1_D9["D1"]}, base=BACKBONE, replicates=2,
                      responses={"val/bpb": {"better": "lower", "margin": 0.01}}, sequential={"max_replicates": 3})
    spec = expand.with_replicates(validate.load_spec(path), 3)
    exp_dir = root / "grow"
    exp_dir.mkdir(parents=True)
    saved.save_sweep_files(exp_dir, spec, uri, None)
    (exp_dir / TARGET_FILE).write_text(json.dumps({"replicates": 3, "command": "trials augment grow --replicates 1"}))
    ledger = open_ledger(uri, spec, identity_tags(spec, root))
    first_new = min((t for t in spec.trials if t.replicate == 2), key=lambda t: t.run_order)
    for t in [t for t in spec.trials if t.replicate < 2] + [first_new]:
        run_id, _ = ledger.open_child(t, {})
        ledger.log_metrics(run_id, {"val/bpb": 2.0}, step=4)
        ledger.finish(run_id, "FINISHED")
    ledger.finish(ledger.parent_id, "KILLED")
    _, before = kids(uri, "grow")
    ended = {r.data.tags["trial_key"]: r.info.end_time for r in before}
    said = []
    out = augment("grow", str(root), replicates=1, say=said.append)
    assert said[0] == ("grow: continuing to 3 replicate blocks, as the interrupted augment asked (`trials augment "
                       "grow --replicates 1`); this adds none beyond them (run the command again for more)")
    assert out["ok"] and out["replicates"] == 3
    assert out["stopped"] == "continued to 3 blocks, as the interrupted augment asked"
    _, runs = kids(uri, "grow")
    assert len(runs) == 6 and len({r.data.tags["trial_key"] for r in runs}) == 6
    assert all(r.info.status == "FINISHED" for r in runs)
    assert {k: e for k, e in ((r.data.tags["trial_key"], r.info.end_time) for r in runs) if k in ended} == ended
    assert saved.load_saved("grow", str(root))[0].replicates == 3 and not (exp_dir / TARGET_FILE).exists()
    # the target reached, the same command is a new request: 3 + 1 blocks, past this sweep's plan, refused before
    # any work (without a plan it would add a fourth block)
    with pytest.raises(ValueError, match=r"^--replicates: 3 \+ 1 blocks pass the sweep's sequential plan of at most "
                                         r"3$"):
        augment("grow", str(root), replicates=1)
    assert not (exp_dir / TARGET_FILE).exists()
    (exp_dir / TARGET_FILE).write_text("[3]")  # storage files are input: one line naming it
    with pytest.raises(ValueError, match=f"^augment: {exp_dir / TARGET_FILE} is not an augment's record"):
        augment("grow", str(root), replicates=1)


def test_a_plan_that_looks_every_few_blocks_adds_them_between_looks(ray_local, tmp_path, corpus_dir):
    """`sequential.look_every`: the blocks between looks, so a confirmation looks at its
    first blocks and again at its maximum (two levels from the spending rule), not after
    every block. A --look-every fills a plan that names none and cannot change one that does."""
    from analysis.sequential import Plan, spent
    from analysis.until_decided import plan_for as _plan
    from trials.augment import blocks_before_look as _step

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "every", D1_D9, base=QUICK, responses=PRIMARY,
                                    sequential={"max_replicates": 3, "look_every": 2}))
    assert spec.sequential["look_every"] == 2
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    said = []
    out = augment("every", storage, until_decided=True, say=said.append)
    looks = [x.replicates for x in out["looks"]]
    assert out["ok"] and out["replicates"] in (1, 3), said  # never 2: the plan looks every 2 blocks
    assert looks in ([1, 3], [3], [1]), said
    parent, runs = kids(uri, "every")
    assert len(runs) == 4 * out["replicates"]
    plan = Plan.from_json(parent.data.tags["sequential"])
    assert plan.look_every == 2 and [x.blocks for x in plan.looks] == looks
    # the plan as declared is the parent's write-once param; a record edited past it is not read
    declared = Plan.from_json(parent.data.params["sequential"])
    assert (declared.max_replicates, declared.look_every, declared.looks) == (3, 2, [])
    from analysis.sweep_reader import load_runs
    edited = json.loads(parent.data.tags["sequential"]) | {"max_replicates": 30}
    MlflowClient(uri).set_tag(parent.info.run_id, "sequential", json.dumps(edited))
    with pytest.raises(ValueError, match="the sequential record is not the plan declared when the sweep was made "
                                         r"\(its max_replicates is 30, the declared plan's 3\)"):
        load_runs("every", uri)
    MlflowClient(uri).set_tag(parent.info.run_id, "sequential", parent.data.tags["sequential"])
    if looks == [1, 3]:
        t = plan.looks[0].t  # a third of the plan's blocks (to the hundredth, as looks keep it)
        assert t == pytest.approx(1 / 3, abs=0.01) and plan.looks[1].t == 1.0
        assert [x.alpha for x in plan.looks] == pytest.approx([spent(t, 0.05), 0.05 - spent(t, 0.05)])
        assert "add 2 replicate blocks (the plan looks every 2)" in said[0]
    declared = {"sequential": Plan(10, 0.05, look_every=4).to_json()}
    assert _step(_plan(declared, 4, None, 0.05, False), 4) == 4 and _step(_plan(declared, 8, None, 0.05, False), 8) == 2
    with pytest.raises(ValueError, match="plan looks every 4 blocks; it cannot change"):
        _plan(declared, 4, None, 0.05, False, look_every=3)
    assert _plan({"sequential": Plan(10, 0.05).to_json()}, 4, None, 0.05, False, look_every=3).look_every == 3
    with pytest.raises(ValueError, match="--look-every: an integer >= 1, with --until-decided"):
        augment("every", storage, replicates=1, look_every=2)
    with pytest.raises(specmod.SpecError, match="sequential.look_every: an integer >= 1"):
        validate.load_spec(write_spec(tmp_path / "b.yaml", corpus_dir, "bad", D1_D9, base=QUICK, responses=PRIMARY,
                                 sequential={"max_replicates": 3, "look_every": 0}))


def test_a_look_that_decided_every_term_stops_the_augment_before_any_training(ray_local, tmp_path, corpus_dir):
    """A report's binding look that decided the family's every term is the plan's last: a
    later `augment --until-decided` looks again at the same runs, finds nothing undecided and
    stops, training nothing (issue 61: it once went on to train blocks that could change no
    verdict). The margin is so wide that any estimate's interval lies within it: negligible (4
    blocks: a term's own block-by-term error needs 3 df)."""
    from analysis.cli import main as analysis_main

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    storage = str(tmp_path / "st")
    wide = {"tf/tau": {"better": "higher", "margin": 1000.0}}
    spec = validate.load_spec(write_spec(tmp_path / "s.yaml", corpus_dir, "done", D1_D9, base=QUICK, responses=wide,
                                         replicates=4, sequential={"max_replicates": 6, "alpha": 0.05}))
    runner.run(spec, tracking_uri=uri, storage=storage, verbose=0)
    assert analysis_main(["report", "done", "--tracking-uri", uri, "--out", str(tmp_path / "rep")]) == 0
    parent, before = kids(uri, "done")
    plan = json.loads(parent.data.tags["sequential"])
    assert len(plan["looks"]) == 1 and plan["looks"][0]["decided"], plan  # the report's look, binding
    said = []
    out = augment("done", storage, until_decided=True, say=said.append)
    assert out["ok"] and out["replicates"] == 4 and out["stopped"].startswith("stop: every term of the family is decided")
    _, after = kids(uri, "done")
    assert sorted(r.info.run_id for r in after) == sorted(r.info.run_id for r in before)  # nothing trained
    assert len(json.loads(kids(uri, "done")[0].data.tags["sequential"])["looks"]) == 1  # the same look, not a new one
