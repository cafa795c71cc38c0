"""The attribution notebooks run end to end (nbclient) on a store made here."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.analysis.conftest import synthetic_sweep

ROOT = Path(__file__).resolve().parents[2]
# the engine's own notebook, and the one DSpark ships as its workload's (`notebooks`)
SHIPPED = {"attribution.ipynb": ROOT / "analysis" / "notebooks", "acceptance_curves.ipynb": ROOT / "dspark" / "notebooks"}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_notebook_executes(name, store, tmp_path, monkeypatch):
    synthetic_sweep(store, failed=1)
    nb = nbformat.read(SHIPPED[name] / name, as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source = (f'EXPERIMENT = "synthetic"\nTRACKING_URI = "{store}"\nRESPONSES = ["spec/tau"]\n'
                     'MARGINS = {"spec/tau": 0.2}\nALPHA = 0.05')
    root = str(Path(__file__).resolve().parents[2])
    # no empty entry: it would stand for the current folder in every later subprocess
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    if name == "attribution.ipynb":
        assert "spec/tau: D1: matters, beyond the margin (shifted -> aligned: +" in text
        assert "spec/tau: D2: negligible within +-0.2 (const4 -> block: " in text
        assert "what-if: margins, responses, alpha or adjustment given" in text  # MARGINS given: not a look
        assert "not detected" not in text
        assert not (tmp_path / "reports").exists()  # the notebook never overwrites the CLI's report
    else:
        assert "runs; 2 speculative slots" in text
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images


def test_notebook_command_resolves_the_default_store_and_keeps_the_cli_report(store, tmp_path):
    """`analysis notebook attribution EXPERIMENT`, run from the folder holding mlflow.db with
    the default store, as the README says."""
    import subprocess
    import sys

    synthetic_sweep(store, failed=0)
    assert store == f"sqlite:///{tmp_path / 'mlflow.db'}"  # the default store, seen from tmp_path
    (tmp_path / "reports" / "synthetic").mkdir(parents=True)
    (tmp_path / "reports" / "synthetic" / "report.html").write_text("the CLI's report")
    r = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "attribution", "synthetic",
                        "--responses", "spec/tau"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = nbformat.read(tmp_path / "reports" / "synthetic" / "attribution.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") for c in out.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "spec/tau: D1: matters, size unsure (shifted -> aligned: +" in text  # no margin declared
    assert "(not recorded: a notebook reads the store and writes nothing)" in text
    assert "no run was left out: every run of the sweep finished" in text and "Empty DataFrame" not in text
    # the terminal shows the answer, not only a path: the verdict table, then where the rest is
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("experiment synthetic: ") and "verdicts (estimate [interval the decision used]):" in lines
    assert any(ln.split()[:3] == ["D1", "matters,", "size"] for ln in lines), r.stdout
    assert not any(ln.startswith("primary: ") for ln in lines)  # the details stay in the notebook
    assert max(map(len, lines)) <= 120 and "in a sentence:" in lines, r.stdout  # the one-screen answer
    assert r.stderr == "", r.stderr[-2000:]  # quiet: no kernel notice, no warning
    assert "\nspec/tau (higher is better; no margin declared; sigma " in text  # the full summary: the last cell
    assert lines[-1].startswith("executed notebook: reports/synthetic/attribution.ipynb")
    assert (tmp_path / "reports" / "synthetic" / "report.html").read_text() == "the CLI's report"
    # no alarming noise: the kernel runs over Unix sockets, and no output holds a warning
    assert "TCP without encryption" not in r.stdout + r.stderr, r.stderr[-2000:]
    assert "Warning" not in text and "IProgress" not in text
    bad = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "attribution", "synthetic"],
                         cwd=tmp_path / "reports", capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr  # no empty store created
    assert not (tmp_path / "reports" / "mlflow.db").exists()
    path = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "../attribution", "synthetic"],
                          cwd=tmp_path / "reports", capture_output=True, text=True)
    assert path.returncode == 2 and "not a notebook's name" in path.stderr, path.stderr  # before the store is asked
    # an experiment the store does not hold, and a cell that raises: one line each, the
    # traceback left in the written notebook
    missing = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "attribution", "nothing"],
                             cwd=tmp_path, capture_output=True, text=True)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "experiment 'nothing' does not exist in sqlite:///" in missing.stderr
    # a notebook neither the engine nor the sweep's workload (read off its record) ships
    unknown = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "curves", "synthetic"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
    assert "no notebook 'curves' for a sweep of 'dspark': the notebooks are acceptance_curves, attribution" in \
        unknown.stderr, unknown.stderr
    raising = subprocess.run([sys.executable, "-m", "analysis.cli", "notebook", "attribution", "synthetic",
                              "--responses", "no/such"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert raising.returncode == 2 and len(raising.stderr.strip().splitlines()) == 1, raising.stderr
    assert "notebook attribution: a cell raised " in raising.stderr and "(the notebook, with the traceback: " in \
        raising.stderr and "Traceback" not in raising.stderr, raising.stderr
    # modules in the folder the command runs from (a received study's) are not imported in place of
    # installed ones: the kernel starts elsewhere and puts that folder last (issue 61)
    for shadow in ("pandas", "json"):
        (tmp_path / f"{shadow}.py").write_text(f"open({str(tmp_path / shadow)!r} + '.ran', 'w').close()\n")
    cli = Path(sys.executable).parent / "analysis"  # the console script, as users run it (not python -m)
    planted = subprocess.run([str(cli), "notebook", "attribution", "synthetic", "--responses", "spec/tau"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=600)
    assert planted.returncode == 0, planted.stderr[-3000:]
    assert not list(tmp_path.glob("*.ran")), "a module of the command's folder ran in the kernel"


def test_a_notebook_is_the_engines_or_one_its_workload_ships(tmp_path):
    """`analysis notebook NAME`: the engine's notebook whatever the workload; else the swept
    workload's own (DSpark's acceptance curves are its metrics', not the engine's); else one
    line naming every notebook there is. A workload is asked for only where the engine has no
    such notebook, and a name is a name, never a path."""
    from analysis.anova import AnalysisError
    from analysis.rendering.notebook import notebook_file
    from trials.workload import load_workload
    from trials.workload_defaults import Loaded, WorkloadError

    dspark = load_workload("dspark")

    def unreachable():
        raise AssertionError("the engine's notebook needs no workload")

    assert notebook_file("attribution", unreachable) == ROOT / "analysis" / "notebooks" / "attribution.ipynb"
    assert notebook_file("acceptance_curves", lambda: dspark) == ROOT / "dspark" / "notebooks" / "acceptance_curves.ipynb"

    class Toy:
        name, config, metrics = "toy", {"lr": 0.1}, {"val/loss": "lower"}

        def train(self, config, report):
            report({"val/loss": 1.0})

    with pytest.raises(AnalysisError, match=r"no notebook 'acceptance_curves' for a sweep of 'toy': the notebooks "
                                            r"are attribution \(the engine's"):
        notebook_file("acceptance_curves", lambda: Loaded(Toy(), "toy"))
    with pytest.raises(AnalysisError, match="the notebooks are acceptance_curves, attribution "):
        notebook_file("curves", lambda: dspark)
    for bad in ("../attribution", "/etc/passwd", "a b", ""):
        with pytest.raises(AnalysisError, match="not a notebook's name"):
            notebook_file(bad, unreachable)
    for bad in (3, "notebooks", Path("")):  # a folder's absolute path: never one the command's folder resolves
        Toy.notebooks = bad
        with pytest.raises(WorkloadError, match="workload 'toy': notebooks must be a folder's absolute path"):
            Loaded(Toy(), "toy")
    Toy.notebooks = str(tmp_path)  # its own folder: its notebooks, beside the engine's
    (tmp_path / "mine.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    assert notebook_file("mine", lambda: Loaded(Toy(), "toy")) == tmp_path / "mine.ipynb"
