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
