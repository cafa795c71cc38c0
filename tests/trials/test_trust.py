"""No code runs from data (trials/workload.py): a workload named by a sweep's storage, its
parent run or a parquet export is imported only where it is installed (the entry point
group dspark_sweeps.workloads) or allowed by the user (DSPARK_SWEEPS_WORKLOADS); every
import failure of a workload the user names ends in one line. Each hostile module writes a
marker file when imported, so a test sees whether it ran."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from trials import workload as workloads

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"name": "t", "base": {"preset": "tiny"},
        "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}}}


def _package(tmp_path: Path) -> Path:
    """A folder of modules that misbehave at import, each leaving a marker when it runs."""
    pkg = tmp_path / "mods"
    pkg.mkdir()
    marker = tmp_path / "imported"
    for name, body in {"evil": "x = 1", "exits": "import sys; sys.exit(0)", "raises": "raise RuntimeError('boom')",
                       "broken": "def f(:\n    pass"}.items():
        (pkg / f"{name}.py").write_text(f"open({str(marker / name)!r}, 'w').close()\n{body}\n")
    marker.mkdir()
    return pkg


def _cli(tmp_path, pkg, *args, env_extra=None, package="trials"):
    env = {k: v for k, v in os.environ.items() if k != workloads.TRUST_ENV}
    env.update({"PYTHONPATH": f"{pkg}{os.pathsep}{ROOT}", "XDG_CONFIG_HOME": str(tmp_path / "config"),
                **(env_extra or {})})
    return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_saved_spec_naming_a_module_does_not_import_it(tmp_path):
    """`trials status` and `list` read a sweep's saved spec as a layout and import no workload
    at all; `resume` needs the workload: one named there that is not installed or allowed is
    refused in one line. The module never runs."""
    pkg = _package(tmp_path)
    storage = tmp_path / "ray_results" / "t"
    storage.mkdir(parents=True)
    (storage / "spec.yaml").write_text(yaml.safe_dump({**GOOD, "workload": "evil:x"}))
    (storage / "sweep.json").write_text(f'{{"tracking_uri": "sqlite:///{tmp_path / "m.db"}"}}')
    (tmp_path / "m.db").write_bytes(b"")
    for command in (["status", "t"], ["list"]):
        r = _cli(tmp_path, pkg, *command)
        assert r.returncode == 0 and "pending" in r.stdout, r.stdout + r.stderr
        assert not (tmp_path / "imported" / "evil").exists(), command
    r = _cli(tmp_path, pkg, "resume", "t")
    out = (r.stdout + r.stderr).strip()
    assert "'evil:x' is recorded with this sweep but is not an installed workload" in out, out
    assert "DSPARK_SWEEPS_WORKLOADS=evil:x" in out and "dspark_sweeps.workloads" in out
    assert "Traceback" not in out and not (tmp_path / "imported" / "evil").exists()
    # allowed by the user: then it is imported (and, being no workload, named as such in one line)
    r = _cli(tmp_path, pkg, "resume", "t", env_extra={workloads.TRUST_ENV: "evil:x"})
    assert (tmp_path / "imported" / "evil").exists() and "lacks" in r.stderr + r.stdout


def test_a_parquet_export_naming_a_module_does_not_import_it(tmp_path):
    """An export keeps its workload's registry (what the analysis needs of a workload): read
    back it imports no workload at all, whatever it names. One without a registry that names
    a module that is not installed or allowed is refused in one line, and the module never runs."""
    import json

    import pyarrow.parquet as pq

    from analysis.sweep_reader import read_parquet
    from trials.export import PARQUET_KEY, to_parquet

    pkg = _package(tmp_path)
    to_parquet(read_parquet(ROOT / "results" / "seed-backbone" / "runs.parquet"), tmp_path / "kept.parquet")
    table = pq.read_table(tmp_path / "kept.parquet")
    meta = json.loads(table.schema.metadata[PARQUET_KEY])
    assert meta["registry"]["metrics"]["val/bpb"]["better"] == "lower"  # the registry travels with the export
    for name, registry in (("named.parquet", meta["registry"]), ("bare.parquet", {})):
        crafted = {**meta, "workload": "evil:x", "registry": registry}
        pq.write_table(table.replace_schema_metadata({**table.schema.metadata,
                                                      PARQUET_KEY: json.dumps(crafted).encode()}), tmp_path / name)
    r = _cli(tmp_path, pkg, "report", "seed-backbone", "--parquet", "named.parquet", package="analysis")
    assert r.returncode == 0 and "val/bpb" in r.stdout, r.stderr[-2000:]  # analysed from the record alone
    r = _cli(tmp_path, pkg, "report", "seed-backbone", "--parquet", "bare.parquet", package="analysis")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "is not an installed workload" in r.stderr
    assert not (tmp_path / "imported" / "evil").exists()


@pytest.mark.parametrize("name, words", [
    ("exits:x", "importing exits called sys.exit(0)"),
    ("raises:x", "importing raises raised RuntimeError: boom"),
    ("broken:x", "importing broken raised SyntaxError (line 2)"),
    (".relative:X", "nor an absolute `package.module:object` path"),
    ("nosuchmodule:X", "cannot import nosuchmodule"),
    ("m" * 100_000 + ":X", "..."),
])
def test_validate_turns_every_import_failure_into_one_line(tmp_path, name, words):
    pkg = _package(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**GOOD, "workload": name}))
    r = _cli(tmp_path, pkg, "validate", "s.yaml")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr[:2000]
    assert len(lines[0]) < 600 and r.stdout == ""


def test_the_installed_workload_loads_by_name_and_the_group_is_declared():
    assert workloads.installed()["dspark"] == "dspark.workload:WORKLOAD"
    assert "dspark_sweeps.workloads" in (ROOT / "pyproject.toml").read_text()
    assert workloads.load_workload("dspark").name == "dspark"
    with pytest.raises(workloads.WorkloadError, match="not an installed workload"):
        workloads.load_workload("json:dumps")  # a real module, named by a record: not imported


def test_a_workload_the_user_ran_stays_allowed_for_them_alone(tmp_path, monkeypatch):
    """`trials run` of a spec naming `package.module:object` keeps it in the user's own list,
    so that their `resume` and `report` of that sweep load it; a list others could write is
    ignored."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(workloads.TRUST_ENV, raising=False)
    (tmp_path / "mine.py").write_text("from tests.toy.workload import WORKLOAD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(workloads.WorkloadError, match="not an installed workload"):
        workloads.load_workload("mine:WORKLOAD")  # named by storage, never run by this user
    workloads.load_workload("mine:WORKLOAD", trusted=True)  # the user's own spec names it
    mine = str((tmp_path / "mine.py").resolve())
    assert workloads.ran_file().read_text() == f"mine:WORKLOAD\t{mine}\n" and "mine:WORKLOAD" in workloads.allowed()
    workloads.ran_file().chmod(0o666)  # writable by others: not the user's word any more
    assert "mine:WORKLOAD" not in workloads.allowed()
    workloads.ran_file().chmod(0o600)


def test_a_workload_the_user_ran_is_trusted_from_its_file_not_by_its_name(tmp_path):
    """Trust is the file the user ran, not the module's name: `analysis report` in a folder
    received from someone, holding its own `mywl.py` beside a store, once ran that file.
    Each command in a process of its own, from the folder a user would run it in."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", workloads.TRUST_ENV)}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    mine, received = tmp_path / "mine", tmp_path / "received"
    for folder, marker in ((mine, "ours"), (received, "theirs")):
        folder.mkdir()
        (folder / "mywl.py").write_text(f"open({str(tmp_path / marker)!r}, 'w').close()\n"
                                        "from examples.mlp_sweep import WORKLOAD\n")

    def load(cwd, trusted):
        code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from trials import workload as w; "
                f"w.load_workload('mywl:WORKLOAD', trusted={trusted})")
        return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)

    assert load(mine, True).returncode == 0 and (tmp_path / "ours").exists()  # the user's own spec named it
    assert load(mine, False).returncode == 0  # their later report, from their folder
    got = load(received, False)  # a report run in the received folder: its mywl.py is not theirs
    assert got.returncode != 0 and not (tmp_path / "theirs").exists(), got.stderr
    said = got.stderr.strip().splitlines()[-1]
    assert f"you ran it from {(mine / 'mywl.py').resolve()}, but here it would be imported from " \
           f"{(received / 'mywl.py').resolve()}, so it is not imported" in said, said
