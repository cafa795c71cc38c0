"""`analysis notebook NAME EXPERIMENT`: execute a shipped attribution notebook with
nbclient (in the venv: no Jupyter server needed), its parameters cell set from the
command line, the store resolved the way the CLIs resolve it (a relative sqlite path
against the current folder). The executed notebook is written beside the reports; the
notebook itself writes no report file."""

from __future__ import annotations

from pathlib import Path

from trials.store.client import absolute_uri, check_store

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


def execute(name: str, experiment: str, tracking_uri: str, out: Path, responses=None, timeout: int = 600,
            margins: dict[str, float] | None = None) -> Path:
    import tempfile

    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    uri = absolute_uri(tracking_uri)
    check_store(uri)
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    params.source = ("import warnings  # tqdm (imported by MLflow) warns that this kernel has no progress widgets\n"
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
        NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def answer(path: Path) -> str:
    """The answer an executed notebook printed: its summary's first screen (the question, the
    look, the verdict table and the alpha line), before the per-response details."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "print(rep.summary)" in cell.source:
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            lines = text.splitlines()
            cut = next((i for i, ln in enumerate(lines) if ln.startswith("primary: ")), len(lines))
            return "\n".join(lines[:cut])
    return ""
