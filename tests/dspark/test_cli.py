import json
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "dspark.cli", *args], capture_output=True, text=True)


def test_bad_override_is_one_line_and_starts_nothing(tmp_path):
    r = run("train", "--preset", "tiny", "--set", "window=diagonal", "--set", f"out_dir={tmp_path / 'o'}")
    assert r.returncode == 2
    assert r.stderr.strip() == ("dspark: error: window: unknown level 'diagonal'; "
                                "allowed: aligned, shifted, ids_only")
    assert not (tmp_path / "o").exists()


def test_train_cli_prints_and_writes_final_metrics(tmp_path, corpus_dir):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"preset: tiny\ntarget_steps: 10\ndraft_steps: 10\neval_interval: 10\n"
                   f"spec_prompts: 0\ndata: ['{corpus_dir}']\nout_dir: {tmp_path / 'o'}\n")
    r = run("train", "--config", str(cfg), "--set", "head=rnn")
    assert r.returncode == 0, r.stderr
    assert "final: val/bpb" in r.stdout and "tf/tau" in r.stdout
    final = json.loads((tmp_path / "o" / "final_metrics.json").read_text())
    assert final["tf/tau"] >= 1.0
    info = json.loads((tmp_path / "o" / "run.json").read_text())
    assert len(info["data_sha256"]) == 64 and info["config"]["head"] == "rnn"


def test_help_lists_every_config_field_with_its_default():
    from dataclasses import fields

    from dspark.config import Config

    r = run("train", "--help")
    assert r.returncode == 0
    for f in fields(Config):
        assert f"  {f.name} = {getattr(Config, f.name)!r}" in r.stdout, f.name
    assert "(default: dspark-train)" in r.stdout


def test_tracked_run_reads_as_a_trial_prints_each_line_once_and_keeps_old_runs(tmp_path, corpus_dir):
    """`--tracking-uri` records the run with a trial's params, tags and metric names; the
    evaluation phases show as progress; no line is printed twice; a second run with the
    default out_dir does not overwrite the first."""
    from mlflow.tracking import MlflowClient

    args = ["train", "--preset", "tiny", "--set", f"data={corpus_dir}", "--set", "target_steps=10",
            "--set", "draft_steps=10", "--set", "eval_interval=5", "--set", "spec_prompts=2",
            "--set", "spec_new_tokens=16", "--tracking-uri", "sqlite:///m.db", "--experiment", "single"]
    env_run = lambda: subprocess.run([sys.executable, "-m", "dspark.cli", *args], capture_output=True,  # noqa: E731
                                     text=True, cwd=tmp_path)
    r = env_run()
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line for line in r.stdout.splitlines() + r.stderr.splitlines() if line.startswith("step ")]
    assert lines and len(lines) == len(set(lines)), lines
    assert sum("tf/tau" in line for line in lines) == len({line.split(":")[0] for line in lines if "tf/tau" in line})
    for phase in ("decode (sampled)", "decode (greedy)", "calibrate (STS)"):
        assert phase in r.stderr, phase
    c = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    exp = c.get_experiment_by_name("single")
    (run_,) = c.search_runs([exp.experiment_id])
    assert run_.info.status == "FINISHED"
    assert run_.data.params["window"] == "aligned" and run_.data.params["draft_steps"] == "10"
    tags = run_.data.tags
    assert len(tags["target_hash"]) == 16 and len(tags["data_sha256"]) == 64 and tags["seed"] == "0"
    assert tags["mlflow.source.name"] == "dspark train" and tags["mlflow.user"]
    assert "spec/tau" in run_.data.metrics and "tf/accept:1" in run_.data.metrics
    for key in run_.data.metrics:  # each metric once per step (the final report repeats the last eval)
        steps = [m.step for m in c.get_metric_history(run_.info.run_id, key)]
        assert len(steps) == len(set(steps)), key
    assert {a.path for a in c.list_artifacts(run_.info.run_id)} >= {"config.json", "final_metrics.json", "plots"}
    assert env_run().returncode == 0
    outs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(outs) == 2 and all((tmp_path / "runs" / o / "final_metrics.json").is_file() for o in outs)
