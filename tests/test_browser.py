"""What users see, in a real browser: a sweep's experiment opens in MLflow's model-training
(runs) view at the link `trials run` prints, and the HTML report renders with its images.
Headless Chromium; skipped where no Chromium is installed (`apt-get install chromium`)."""

import html
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from trials.store.ui import run_url, ui_url
from tests.analysis.conftest import synthetic_sweep

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine")


def browser(*args: str) -> str:
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000",
                          "--virtual-time-budget=20000", *args], capture_output=True, text=True, timeout=180)
    return out.stdout


def screenshot(name: str, tmp_path: Path) -> Path:
    """Where a screenshot goes: the test's folder, or, with DSPARK_SCREENSHOTS=docs, the
    README's copy (`DSPARK_SCREENSHOTS=docs make test` re-takes them)."""
    folder = os.environ.get("DSPARK_SCREENSHOTS")
    return (Path(folder) if folder else tmp_path) / name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_ui(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = synthetic_sweep(uri, name="browse", replicates=4, failed=0)  # a term's own error needs 4 blocks
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

    from trials.store.ui import mlflow_link

    base, uri, spec = mlflow_ui
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(spec.name)
    dom = browser("--dump-dom", ui_url(exp.experiment_id, base))
    # the runs table (model-training view) with the sweep's parent run, not GenAI's overview
    assert "Run Name" in dom and f"sweep {spec.name}" in dom, dom[-2000:]
    # the link a sweep prints opens its saved runs view: the trials, not the parent, with the
    # factors and the primary responses as columns and the whole run names
    link = mlflow_link(uri, exp.experiment_id, "p", ui=base).split(": ")[-1]
    assert link == ui_url(exp.experiment_id, base, view=True)
    dom = browser("--dump-dom", link)
    for column in ("factor.D1", "factor.D2", "factor.D9", "replicate", "spec/tau"):
        assert column in dom, (column, dom[-3000:])
    assert "aligned·block·hidden r0" in dom and "shifted·const4·markov r1" in dom
    assert f"sweep {spec.name}" not in dom and "does not exist" not in dom
    # the factors first, then the primary responses (at 1600 px, with MLflow's Assistant panel
    # open, the factors once fell off the right)
    position = {}
    for tag in re.findall(r"<div [^>]*col-id=[^>]*>", dom):
        col, at = re.search(r'col-id="([^"]+)"', tag), re.search(r'aria-colindex="(\d+)"', tag)
        if col and at:
            position.setdefault(html.unescape(col[1]), int(at[1]))
    order = ["tags.`factor.D1`", "tags.`factor.D2`", "tags.`factor.D9`", "tags.`replicate`", "metrics.`spec/tau`"]
    assert [position.get(c) for c in order] == sorted(position.get(c, 0) for c in order), position
    # ... and every primary response ends inside the table at 1600 px (the saved widths applied)
    pinned = int(re.search(r'ag-pinned-left-header[^>]*style="width: (\d+)px', dom)[1])
    edges = [int(a) + int(b) for a, b in re.findall(r'col-id="metrics\.`[^`]+`"[^>]*style="left: (\d+)px; width: (\d+)px',
                                                    dom)]
    from trials.store.ui import TABLE_PX
    assert edges and pinned + max(edges) <= TABLE_PX, (pinned, edges)
    shot = screenshot("mlflow-runs-view.png", tmp_path)
    browser(f"--screenshot={shot}", link)
    assert shot.stat().st_size > 10_000
    # the chart view opens on the primary responses' charts, every run in them
    charts = browser("--dump-dom", link + "&compareRunsMode=CHART")
    assert "^(spec/tau" in charts and "Show first 10" not in charts, charts[-3000:]
    shot = screenshot("mlflow-charts-view.png", tmp_path)
    browser(f"--screenshot={shot}", link + "&compareRunsMode=CHART")
    # a run's page, as the report links it, stays in the model-training view (no GenAI
    # "Evaluations" entry)
    run = client.search_runs([exp.experiment_id], "tags.trial_key != ''", max_results=1)[0]
    page = browser("--dump-dom", run_url(exp.experiment_id, run.info.run_id, base))
    assert "Model metrics" in page and "Evaluations" not in page
    # the parent run's page shows the answer: `analysis report` logs the verdict table as the
    # run's description, with a link to the report among its artifacts
    from analysis.cli import main as analysis_main

    assert analysis_main(["report", spec.name, "--tracking-uri", uri, "--out", str(tmp_path / "rep")]) == 0
    parent = client.search_runs([exp.experiment_id], "tags.sweep_parent = 'true'")[0]
    url = run_url(exp.experiment_id, parent.info.run_id, base)
    page = browser("--dump-dom", url)
    assert re.search(r"<td>D1</td>\s*<td>matters, size unsure</td>", page), page[-4000:]
    # the answer leads the description; the report link opens in the model-training view
    assert re.search(r"The answer</strong>, a sentence per primary response:.*?<li>spec/tau: D1 \(shifted -&gt; "
                     r"aligned\) improves it", page, re.S), page[-4000:]
    link = f"runs/{parent.info.run_id}/artifactPath/attribution/report.html?workflowType=machine_learning"
    assert link.replace("&", "&amp;") in page or link in page, page[-4000:]
    # few tags above it: none per verdict, none empty
    assert "verdict.spec/tau" not in page and "primary_terms" not in page
    shot = screenshot("mlflow-parent-run.png", tmp_path)
    browser(f"--screenshot={shot}", "--window-size=1600,2200", url)  # tall enough to reach the description
    assert shot.stat().st_size > 10_000


def test_the_report_renders_with_its_images(tmp_path):
    import matplotlib.image as mpimg

    from analysis.cli import main as analysis_main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic_sweep(uri, name="render", replicates=2, failed=0)
    assert analysis_main(["report", "render", "--tracking-uri", uri, "--out", str(tmp_path / "rep"), "--no-log"]) == 0
    html = tmp_path / "rep" / "render" / "report.html"
    dom = browser("--dump-dom", html.as_uri())
    assert dom.count('src="data:image/png;base64,') >= 4  # the plots travel inside the one file
    # below the first screen, as a DOE report reads: terms by their levels, plain column names
    # with a legend, one interval level per table (in its header), the details folded
    assert "<th>D1: shifted -&gt; aligned</th>" in dom and "<th>p x family</th>" in dom
    assert not any(raw in dom for raw in ("<th>in_family</th>", "<th>to_boundary</th>", "<th>p_equiv</th>"))
    assert re.search(r"<h3>Effects, 98\.3+%? intervals", dom) or re.search(r"<h3>Effects, [0-9.]+% intervals", dom)
    assert dom.count("<details>") >= 4 and "p_adj" not in dom.split("<details>")[0]
    # the answer first: the question, then the verdict table, before anything else
    assert re.search(r"</h1>\s*<p>experiment render: [^<]*</p>\s*<p class=\"look\">fixed-sample "
                     r"analysis[^<]*</p>\s*<table class=\"t verdicts\"", dom), \
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


def page_height(url: str, tmp_path: Path) -> int:
    """The page's content height as Chromium lays it out at 1600 px: its last non-white row."""
    import matplotlib.image as mpimg
    import numpy as np

    shot = tmp_path / "tall.png"
    browser(f"--screenshot={shot}", "--window-size=1600,16000", "--hide-scrollbars", url)
    pixels = mpimg.imread(shot)
    rows = np.where((pixels[..., :3] < 0.98).any(axis=(1, 2)))[0]
    assert len(rows) and pixels.shape[0] == 16000
    return int(rows.max()) + 1


def test_every_committed_report_is_at_most_a_third_of_the_old_height(tmp_path):
    """The demo's report was about 37,700 px tall: every section unfolded, a 121-line summary
    at its end. Each committed study's report, five primary responses the most, now fits in
    a third of that, its details folded."""
    root = Path(__file__).resolve().parents[1] / "results"
    heights = {p.parent.name: page_height(p.as_uri(), tmp_path) for p in sorted(root.glob("*/report.html"))}
    assert heights and max(heights.values()) <= 37_700 // 3, heights
