"""A recorded tiny-run curve pins regressions in the model, loss, data and optimiser.

If a change alters these numbers on purpose, regenerate with
`python -m tests.dspark.test_pinned` and say why in the commit message.
"""

import json
import sys
from pathlib import Path

import pytest

from dspark.config import from_dict
from dspark.train import train

RECORD = Path(__file__).resolve().parents[1] / "data" / "tiny_curve.json"
KEYS = ("target/loss", "val/bpb", "train/loss", "tf/tau", "tf/ce", "tf/accept@1")


def curve(tmp):
    cfg = from_dict(dict(preset="tiny", target_steps=12, draft_steps=12, eval_interval=4, eval_batches=1,
                         batch_size=4, seq_len=64, spec_prompts=0, max_corpus_bytes=300_000, out_dir=str(tmp)))
    rows = []
    train(cfg, report=lambda m, c, items=None: rows.append({k: m[k] for k in KEYS if k in m} | {"step": m["step"]}))
    return rows


def test_tiny_curve_matches_the_record(tmp_path):
    recorded = json.loads(RECORD.read_text())
    got = curve(tmp_path)
    assert len(got) == len(recorded)
    for g, r in zip(got, recorded):
        assert g.keys() == r.keys()
        for k in r:
            assert g[k] == pytest.approx(r[k], rel=1e-4), (r["step"], k)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.write_text(json.dumps(curve(tmp), indent=1))
    print(f"wrote {RECORD}", file=sys.stderr)
