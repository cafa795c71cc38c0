"""What users see, in a real browser: a sweep's experiment opens in MLflow's model-training
(runs) view at the link `trials run` prints, and the HTML report renders with its images.
Headless Chromium; skipped where no Chromium is installed (`apt-get install chromium`)."""

import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dspark.record import ui_url
from tests.analysis.conftest import synthetic_sweep

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine")


def browser(*args: str) -> str:
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000",
                          "--virtual-time-budget=20000", *args], capture_output=True, text=True, timeout=180)
    return out.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_ui(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = synthetic_sweep(uri, name="browse", replicates=2, failed=0)
    port = free_port()
    mlflow = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow), "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError("mlflow ui did not start")
                time.sleep(1)
        yield base, uri, spec
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_printed_link_opens_the_runs_view(mlflow_ui, tmp_path):
    from mlflow.tracking import MlflowClient

    base, uri, spec = mlflow_ui
    exp = MlflowClient(uri).get_experiment_by_name(spec.name)
    dom = browser("--dump-dom", ui_url(exp.experiment_id, base))
    # the runs table (model-training view) with the sweep's parent run, not GenAI's overview
    assert "Run Name" in dom and f"sweep {spec.name}" in dom, dom[-2000:]
    shot = tmp_path / "runs.png"
    browser(f"--screenshot={shot}", ui_url(exp.experiment_id, base))
    assert shot.stat().st_size > 10_000


def test_the_report_renders_with_its_images(tmp_path):
    import matplotlib.image as mpimg

    from analysis.cli import main as analysis_main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic_sweep(uri, name="render", replicates=2, failed=0)
    assert analysis_main(["report", "render", "--tracking-uri", uri, "--out", str(tmp_path / "rep"),
                          "--responses", "spec/tau", "--no-log"]) == 0
    html = tmp_path / "rep" / "render" / "report.html"
    dom = browser("--dump-dom", html.as_uri())
    assert dom.count('src="data:image/png;base64,') >= 4  # the plots travel inside the one file
    assert "p_adj" in dom and "D1" in dom
    # the answer first: the question, then the verdict table, before anything else
    assert re.search(r"</h1>\s*<p>experiment render: the question is[^<]*</p>\s*<table class=\"t verdicts\"", dom), \
        dom[dom.find("</h1>"):dom.find("</h1>") + 400]
    # one drift computation: the summary's slope and p are the plot's
    summary = re.search(r"drift check: residual slope ([+-][0-9.e+-]+) per run within blocks, p=([0-9.e+-]+)", dom)
    caption = re.search(r"drift within blocks: slope ([+-][0-9.e+-]+)/run, p=([0-9.e+-]+)", dom)
    assert summary and caption and summary.groups() == caption.groups(), (summary, caption)
    assert 'alt="spec_tau_residuals"' in dom or "_residuals" in dom  # normal probability, residuals vs fitted
    shot = tmp_path / "report.png"
    browser(f"--screenshot={shot}", html.as_uri())
    pixels = mpimg.imread(shot)
    assert pixels.std() > 0.05  # not a blank page
