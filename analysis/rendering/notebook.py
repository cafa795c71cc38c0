"""`analysis notebook NAME EXPERIMENT`: execute a shipped notebook (the engine's own, under
analysis/notebooks, or one the swept workload ships in its `notebooks` folder) with
nbclient (in the venv: no Jupyter server needed), its parameters cell set from the
command line, the store resolved the way the CLIs resolve it (a relative sqlite path
against the current folder). The executed notebook is written beside the reports; the
notebook itself writes no report file. Its kernel starts in a private empty folder, so that
no module of the folder the command runs from (a received study's, say a `pandas.py`) shadows
an installed one; its first cell then moves to that folder and puts it last on the import path,
where `analysis report` finds a user's own workload. Nothing in the output folder is imported."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from trials.store.client import absolute_uri, check_store

from ..anova import AnalysisError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"  # analysis/notebooks


def check_notebook_name(name: str) -> None:
    """A notebook's name is a name, never a path: one line where it is not."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", name):
        raise AnalysisError(f"notebook {name[:60]!r}: not a notebook's name (letters, digits, '_' and '-')")


def notebook_file(name: str, workload_of) -> Path:
    """The notebook NAME: the engine's own, else one the swept workload ships (`workload_of()`:
    the loaded workload, `trials.workload_defaults.Loaded`, asked for only then); one line
    naming those there are where neither has it. The engine's come first: a workload's
    notebook never stands in for one of them."""
    check_notebook_name(name)
    if (NOTEBOOKS / f"{name}.ipynb").is_file():
        return NOTEBOOKS / f"{name}.ipynb"
    workload = workload_of()
    own = [Path(workload.notebooks)] if workload.notebooks else []
    if own and (own[0] / f"{name}.ipynb").is_file():
        return own[0] / f"{name}.ipynb"
    there = sorted({p.stem for f in [NOTEBOOKS, *own] if f.is_dir() for p in f.glob("*.ipynb")})
    raise AnalysisError(f"no notebook {name!r} for a sweep of {workload.name!r}: the notebooks are "
                        f"{', '.join(there)} (the engine's and those the workload ships)")


def execute(notebook: Path, experiment: str, tracking_uri: str, out: Path, responses=None, timeout: int = 600,
            margins: dict[str, float] | None = None) -> Path:
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    uri = absolute_uri(tracking_uri)
    check_store(uri)
    nb, name = nbformat.read(notebook, as_version=4), notebook.stem
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    here = os.getcwd()
    params.source = ("import os, sys  # the command's folder: after the installed packages, never before them\n"
                     f"sys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())] + [{here!r}]\n"
                     f"os.chdir({here!r})\n"
                     "import warnings  # tqdm (imported by MLflow) warns that this kernel has no progress widgets\n"
                     "warnings.filterwarnings('ignore', message='IProgress not found')\n"
                     f"EXPERIMENT = {experiment!r}\nTRACKING_URI = {uri!r}\n"
                     f"RESPONSES = {list(responses) if responses else None!r}\nMARGINS = {dict(margins or {}) or None!r}\n"
                     "ALPHA = None")
    folder = Path(out) / experiment
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dspark-kernel-") as sockets:
        # the kernel talks over Unix sockets in a private folder, not TCP ports that any local
        # user could connect to (jupyter_client's "ipc" transport)
        km = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"))
        # the kernel's own log (its shutdown notices) goes to a file, said only if the run fails:
        # a cell's error is in the notebook and raised here, not in the kernel's stderr
        log = Path(sockets) / "kernel.log"
        with open(log, "w") as stderr:
            try:
                # the kernel starts in the private folder (module docstring); its first cell moves it
                NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                               resources={"metadata": {"path": sockets}}).execute(stderr=stderr)
            except CellExecutionError as e:  # the cell's traceback stays in the notebook written here
                path = folder / f"{name}.ipynb"
                nbformat.write(nb, path)
                said = " ".join(f"{e.ename}: {e.evalue}".split())[:300]
                raise AnalysisError(f"notebook {name}: a cell raised {said} (the notebook, with the traceback: "
                                    f"{path})") from None
            except Exception:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                if tail:
                    print("analysis: the notebook's kernel log ends:\n  " + "\n  ".join(tail), file=sys.stderr)
                raise
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def answer(path: Path) -> str:
    """The answer an executed notebook printed on one screen (`rep.brief`: the question, the
    look, each response's verdicts within 120 columns, a sentence per response, the next step)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "print(rep.brief)" in cell.source:
            return "".join(o.get("text", "") for o in cell.get("outputs", [])
                           if o.get("output_type") == "stream").rstrip("\n")
    return ""
