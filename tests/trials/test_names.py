"""One sweep per name per store (`trials.driver.identity`), on a real MLflow SQLite store: another
storage or other trials under a name the store holds are refused before any work; the same
spec into the same storage reruns (resumes) as before."""

import json
import shutil

import pytest
import ray
from mlflow.tracking import MlflowClient

from trials.store.keys import STORAGE_TAG, TRIALS_TAG, sweep_parent
from trials import expand, saved, validate
from trials.cli import main
from trials.driver.identity import check_same_sweep, fingerprint, identity_tags
from trials.recover import recover
from trials.tracking import open_ledger
from tests.trials.conftest import D1_D9, write_spec

BACKBONE = {"parallel_stage": "backbone", "target_steps": 4, "eval_interval": 2, "eval_batches": 1,
            "spec_prompts": 0, "seq_len": 64, "max_corpus_bytes": 300_000}
D1_D2 = {"D1": D1_D9["D1"], "D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}}}


def _first_sweep(tmp_path, corpus_dir, uri):
    """Sweep `same` as `trials run` leaves it, made without Ray: its saved files in storage
    A, its parent (with a shared target's tag) and four FINISHED runs in the store."""
    path = write_spec(tmp_path / "first.yaml", corpus_dir, "same", D1_D9, base=BACKBONE,
                      responses={"val/bpb": {"better": "lower", "margin": 0.01}})
    spec, root = validate.load_spec(path), (tmp_path / "A").resolve()
    (root / "same").mkdir(parents=True)
    saved.save_sweep_files(root / "same", spec, uri, None)
    ledger = open_ledger(uri, spec, identity_tags(spec, root))
    ledger.client.set_tag(ledger.parent_id, "target.0123456789abcdef", str(root / "targets" / "x.pt"))
    for i, t in enumerate(spec.trials):
        run_id, _ = ledger.open_child(t, {})
        ledger.log_metrics(run_id, {"tf/tau": 1.0 + i, "val/bpb": 2.0}, step=4)
        ledger.finish(run_id, "FINISHED")
    ledger.finish(ledger.parent_id, "FINISHED")
    return spec, root, path


def _store_state(uri):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("same")
    runs = c.search_runs([exp.experiment_id], "", max_results=100)
    return sorted((r.info.run_id, r.info.status, json.dumps(r.data.tags, sort_keys=True),
                   json.dumps(r.data.metrics, sort_keys=True)) for r in runs)


def test_another_storage_or_other_trials_under_a_stored_name_are_refused_before_any_work(tmp_path, corpus_dir,
                                                                                          capsys):
    """Once: another base config (draft_steps 45 there, target_steps 5 here) into a new
    storage trained every trial, then kept the first sweep's runs and printed their means as
    its own; another design (D1 x D2) merged both sweeps' runs and overwrote the parent."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec, a, first = _first_sweep(tmp_path, corpus_dir, uri)
    before = _store_state(uri)
    capsys.readouterr()
    other_base = write_spec(tmp_path / "base.yaml", corpus_dir, "same", D1_D9, base={**BACKBONE, "target_steps": 5})
    other_design = write_spec(tmp_path / "design.yaml", corpus_dir, "same", D1_D2, base=BACKBONE)
    way = f"give this sweep another name, or continue that one with: trials resume same --storage {a}"
    b = (tmp_path / "B").resolve()
    for path in (other_base, other_design, first):  # the first spec itself into another storage too
        assert main(["run", str(path), "--tracking-uri", uri, "--storage", str(b)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"trials: error: run: sweep 'same' already exists in the store {uri} with its storage at "
                       f"{a}, not {b}; {way}"], err
    # into the first sweep's own storage, other trials are refused by the store's record
    assert main(["run", str(other_base), "--tracking-uri", uri, "--storage", str(a)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"trials: error: run: sweep 'same' already exists in the store {uri} with other trials (another workload, base config "
        f"or design; its storage: {a}); {way}"]
    assert not b.exists() and not ray.is_initialized()  # nothing written, Ray never started
    assert _store_state(uri) == before  # runs, parent tags (responses, target.*) and metrics as they were
    # recover, reeval and time check the same before any work
    shutil.copytree(a, b)  # a copy of the first sweep's storage
    with pytest.raises(ValueError, match=f"^recover: sweep 'same' already exists .* storage at {a}, not {b}"):
        recover(spec, b / "same", uri)
    assert main(["reeval", "same", "--eval-batches", "4", "--storage", str(b)]) == 2
    assert capsys.readouterr().err.startswith("trials: error: reeval: sweep 'same' already exists")
    assert main(["time", "same", "--storage", str(b)]) == 2
    assert capsys.readouterr().err.startswith("trials: error: time: sweep 'same' already exists")
    assert _store_state(uri) == before


def test_moved_storage_and_a_parent_without_the_record_are_the_same_sweep(tmp_path, corpus_dir):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec, a, _ = _first_sweep(tmp_path, corpus_dir, uri)
    c = (tmp_path / "C").resolve()
    a.rename(c)  # the recorded storage no longer holds the sweep; C holds its saved spec
    with pytest.raises(ValueError, match=rf"storage at {a} \(which no longer holds it\), not .*/D; give this sweep "
                                         "another name$"):
        check_same_sweep(spec, uri, (tmp_path / "D").resolve(), "run")  # D does not hold it: not a move
    check_same_sweep(spec, uri, c, "resume")
    ledger = open_ledger(uri, spec, identity_tags(spec, c))  # what resume then records
    tags = ledger.client.get_run(ledger.parent_id).data.tags
    assert tags[STORAGE_TAG] == str(c) and tags[TRIALS_TAG] == fingerprint(spec)
    with pytest.raises(ValueError, match=f"storage at {c}, not .*; .* trials resume same --storage {c}$"):
        check_same_sweep(spec, uri, a, "run")  # A is another storage now
    for k in (STORAGE_TAG, TRIALS_TAG):  # a parent made before the record: adopted, not refused
        ledger.client.delete_tag(ledger.parent_id, k)
    check_same_sweep(spec, uri, (tmp_path / "E").resolve(), "run")
    augmented = expand.with_replicates(spec, 3)  # augment's blocks keep the fingerprint
    assert fingerprint(augmented) == fingerprint(spec) and len(augmented.trials) == 12


def test_the_same_spec_into_the_same_storage_reruns_as_before(tmp_path, corpus_dir, capsys):
    """A rerun resumes: every trial FINISHED in the store, so nothing trains and the sweep
    reports its own four runs (Ray starts, as any run's does)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    spec, a, first = _first_sweep(tmp_path, corpus_dir, uri)
    before = {row[0]: row[3] for row in _store_state(uri)}
    assert main(["run", str(first), "--tracking-uri", uri, "--storage", str(a)]) == 0
    out = capsys.readouterr().out
    assert "same: 4 finished, 0 failed of 4 trials" in out
    after = _store_state(uri)
    assert {row[0]: row[3] for row in after} == before and len(after) == 5  # the same runs and metrics
    client = MlflowClient(uri)
    tags = sweep_parent(client, client.get_experiment_by_name("same").experiment_id).data.tags
    assert tags[STORAGE_TAG] == str(a) and tags[TRIALS_TAG] == fingerprint(spec)


def test_status_of_a_sweep_without_responses_shows_its_workloads_defaults(tmp_path, corpus_dir, capsys):
    """`status` imports no workload: `trials run` keeps the responses it resolved (a backbone
    sweep's: val/bpb) in sweep.json, and status shows them; a file from before shows none,
    and one whose list is not names is refused in one line."""
    path = write_spec(tmp_path / "nores.yaml", corpus_dir, "nores", D1_D9, base=BACKBONE)
    spec, root = validate.load_spec(path), (tmp_path / "A").resolve()
    assert not spec.responses
    (root / "nores").mkdir(parents=True)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    MlflowClient(uri).search_experiments()  # the store exists; status opens none (no driver died)
    saved.save_sweep_files(root / "nores", spec, uri, None)
    kept = json.loads((root / "nores" / "sweep.json").read_text())
    assert kept["responses"][0] == "val/bpb"
    assert main(["status", "nores", "--storage", str(root)]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "val/bpb" in header.split() and "state" in header.split()
    del kept["responses"]
    (root / "nores" / "sweep.json").write_text(json.dumps(kept))
    assert main(["status", "nores", "--storage", str(root)]) == 0
    assert "val/bpb" not in capsys.readouterr().out
    (root / "nores" / "sweep.json").write_text(json.dumps({**kept, "responses": [3]}))
    assert main(["status", "nores", "--storage", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep.json: responses: a list of response names" in err
