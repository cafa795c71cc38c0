"""dspark.checkpoint: a checkpoint reads back what was written; a damaged or foreign one is
named by its problem check and refused by the reader, never unpickled."""

import hashlib
import json
import re

import pytest
import torch

from dspark.checkpoint import CHECKSUM_FILE, checkpoint_problem, read_checkpoint, write_checkpoint
from tests.conftest import tiny


def _state(cfg, step: int = 7) -> dict:
    return {"config": json.dumps(cfg.to_dict()), "data_sha256": "ab" * 32, "stage": "draft", "step": step,
            "head": {"w": torch.arange(6.0).view(2, 3)}, "rng": {"torch": torch.get_rng_state()}, "history": "[]"}


class NotATensor:
    """Something a weights_only load refuses to unpickle."""


def test_a_checkpoint_reads_back_what_was_written(tmp_path):
    cfg = tiny(out_dir=str(tmp_path))
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "curve.txt").write_text("1 2 3")
    state = _state(cfg)
    ckpt = write_checkpoint(tmp_path, state, cfg.to_dict())
    assert ckpt == tmp_path / "checkpoint" and checkpoint_problem(ckpt) is None
    assert not (tmp_path / "checkpoint.tmp").exists()
    back = read_checkpoint(ckpt, cfg)
    assert set(back) == set(state) and back["step"] == 7 and back["config"] == state["config"]
    assert torch.equal(back["head"]["w"], state["head"]["w"]) and torch.equal(back["rng"]["torch"], state["rng"]["torch"])
    assert (ckpt / "artifacts" / "curve.txt").read_text() == "1 2 3"
    assert json.loads((ckpt / "config.json").read_text()) == json.loads(json.dumps(cfg.to_dict()))
    assert read_checkpoint(ckpt, cfg.replace(eval_batches=3, out_dir="elsewhere"))["step"] == 7  # trains the same
    with pytest.raises(ValueError, match=r"trained with other values of window \('aligned', now 'shifted'\)"):
        read_checkpoint(ckpt, cfg.replace(window="shifted"))
    write_checkpoint(tmp_path, _state(cfg, step=8), cfg.to_dict())
    assert read_checkpoint(ckpt, cfg)["step"] == 8  # the newer one replaced it


def test_the_problem_check_names_the_bad_file(tmp_path):
    cfg = tiny(out_dir=str(tmp_path))
    ckpt = write_checkpoint(tmp_path, _state(cfg), cfg.to_dict())
    state = ckpt / "state.pt"
    blob = state.read_bytes()
    state.write_bytes(blob[: len(blob) // 2])  # a copy cut short by a full disk
    assert checkpoint_problem(ckpt) == f"{state} does not match its checksum (truncated or altered)"
    with pytest.raises(ValueError, match=re.escape(f"resume: {state} does not match its checksum")):
        read_checkpoint(ckpt, cfg)
    (ckpt / CHECKSUM_FILE).unlink()  # as written before checksums existed: judged by torch's zip directory
    assert checkpoint_problem(ckpt) == f"{state} is not a dspark checkpoint (cut short, or not a torch file)"
    state.unlink()
    assert checkpoint_problem(ckpt) == f"{ckpt} holds no state.pt"
    assert checkpoint_problem(tmp_path / "nowhere") == f"{tmp_path / 'nowhere'} is not a checkpoint directory"


@pytest.mark.parametrize("content, error", [({"step": 1}, "KeyError"), ({"x": NotATensor()}, "UnpicklingError")])
def test_an_intact_torch_file_that_is_no_dspark_state_is_refused_unloaded(tmp_path, content, error):
    """Its checksum right, so the problem check passes it; the reader (weights_only) names it."""
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    torch.save(content, ckpt / "state.pt")
    (ckpt / CHECKSUM_FILE).write_text(hashlib.sha256((ckpt / "state.pt").read_bytes()).hexdigest())
    assert checkpoint_problem(ckpt) is None
    with pytest.raises(ValueError, match=re.escape(f"{ckpt / 'state.pt'} is not a dspark checkpoint ({error})")):
        read_checkpoint(ckpt, tiny())
