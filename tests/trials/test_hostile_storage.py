"""Storage files read through one guarded reader (trials/layout.py, trials/store/kept.py):
a result file nested a million deep, or whose `step` is a list or text, is named in one line
with what to do, and never stops the other sweeps from listing."""

import json

import pytest
import yaml

from trials.cli import main
from trials.layout import key_hash

SPEC = {"name": "s", "base": {"preset": "tiny"},
        "factors": {"D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}}}}


def _sweep(root, name, lines):
    d = root / name
    d.mkdir(parents=True)
    (d / "spec.yaml").write_text(yaml.safe_dump({**SPEC, "name": name}))
    (d / "sweep.json").write_text(json.dumps({"tracking_uri": f"sqlite:///{root / 'm.db'}"}))
    trial = d / f"fn_00000_{key_hash('D1=shifted#r0')}"
    trial.mkdir()
    (trial / "result.json").write_text("\n".join(lines) + "\n")
    return trial / "result.json"


@pytest.mark.parametrize("line, words", [
    ("[" * 200_000 + "]" * 200_000, "nested deeper than 64 levels"),
    ('{"step": [1], "spec/tau": 2.0}', "step: a number >= 0, got '[1]'"),
    ('{"step": "ten", "spec/tau": 2.0}', "step: a number >= 0, got 'ten'"),
    ('{"step": 3, "done": "yes"}', "done: true or false"),
    ("[1, 2]", "not a JSON object"),
])
def test_a_hostile_result_file_is_named_in_one_line_and_the_others_still_list(tmp_path, capsys, line, words):
    root = tmp_path / "st"
    (tmp_path / "st").mkdir()
    (root / "m.db").write_bytes(b"")
    bad = _sweep(root, "bad", [line, '{"step": 1, "done": false}'])
    _sweep(root, "good", ['{"step": 1, "spec/tau": 2.0, "done": false}'])
    assert main(["status", "bad", "--storage", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}, line 1: {words}" in err[0] and "move the trial's folder" in err[0], err
    assert len(err[0]) < 600
    assert main(["list", "--storage", str(root)]) == 0
    rows = {r.split()[0]: r for r in capsys.readouterr().out.splitlines()[2:] if r.strip()}
    assert "unreadable" in rows["bad"] or "line 1" in rows["bad"], rows
    assert "1 running" in rows["good"] or "1 pending" in rows["good"] or "killed" in rows["good"], rows


def test_a_last_line_cut_by_a_crash_is_skipped(tmp_path, capsys):
    root = tmp_path / "st"
    root.mkdir()
    (root / "m.db").write_bytes(b"")
    _sweep(root, "cut", ['{"step": 1, "spec/tau": 2.0, "done": false}', '{"step": 2, "spec/ta'])
    assert main(["status", "cut", "--storage", str(root)]) == 0
