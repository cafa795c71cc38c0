"""sweeps/hf-drafter.yaml at its smallest: the shipped spec's HF target (qwen3-tiny, built in
code), shrunk, swept by Ray Tune into MLflow, its shared target trained once, and the
analysis reading it back (issue 59)."""

from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from analysis.sweep_reader import load_runs
from trials import runner, validate

SPEC = Path(__file__).resolve().parents[2] / "sweeps" / "hf-drafter.yaml"
SMALL = {"target_steps": 6, "draft_steps": 4, "eval_interval": 3, "eval_batches": 1, "seq_len": 64,
         "block_size": 4, "spec_prompts": 2, "spec_prompt_len": 8, "spec_new_tokens": 8, "max_corpus_bytes": 300000}


def test_the_hf_drafter_sweep_runs_on_its_tiny_target(ray_local, tmp_path, corpus_dir):
    raw = yaml.safe_load(SPEC.read_text())
    assert raw["base"]["target_model"] == "qwen3-tiny"
    raw["base"].update(SMALL, data=[str(corpus_dir)])
    raw["factors"] = {f: raw["factors"][f] for f in ("D1", "D9")}  # 4 trials: the spec's own levels
    raw["primary_terms"], raw["replicates"] = ["D1", "D9"], 1
    path = tmp_path / "hf.yaml"
    path.write_text(yaml.safe_dump(raw))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    runner.run(validate.load_spec(path), tracking_uri=uri, storage=str(tmp_path / "st"), verbose=0)
    targets = list((tmp_path / "st" / "targets").glob("*.pt"))
    assert len(targets) == 1  # one tiny HF target, trained once for the four trials
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("hf-drafter")
    runs = [r for r in client.search_runs([exp.experiment_id], "tags.trial_key != ''")]
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.params["target_model"] for r in runs} == {"qwen3-tiny"}
    assert all(r.data.metrics["spec/tau"] >= 1 for r in runs)
    sweep = load_runs("hf-drafter", uri)
    assert len(sweep.runs) == 4 and set(sweep.runs["D1"].astype(str)) == {"shifted", "aligned"}
