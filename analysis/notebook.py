"""`analysis notebook NAME EXPERIMENT`: execute a shipped attribution notebook with
nbclient (in the venv: no Jupyter server needed), its parameters cell set from the
command line, the store resolved the way the CLIs resolve it (a relative sqlite path
against the current folder). The executed notebook is written beside the reports; the
notebook itself writes no report file."""

from __future__ import annotations

from pathlib import Path

from dspark.record import absolute_uri, check_store

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


def execute(name: str, experiment: str, tracking_uri: str, out: Path, responses=None, timeout: int = 600,
            margins: dict[str, float] | None = None) -> Path:
    import nbformat
    from nbclient import NotebookClient

    uri = absolute_uri(tracking_uri)
    check_store(uri)
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source = (f"EXPERIMENT = {experiment!r}\nTRACKING_URI = {uri!r}\n"
                     f"RESPONSES = {list(responses) if responses else None!r}\nMARGINS = {dict(margins or {}) or None!r}\n"
                     "ALPHA = 0.05")
    folder = Path(out) / experiment
    folder.mkdir(parents=True, exist_ok=True)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path
