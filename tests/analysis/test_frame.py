"""The sweep frame (`analysis.frame.SweepFrame`) across a parquet export: the committed
studies' exports (written while the record rode in pandas attrs) come back as they went."""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis.load import PARQUET_KEY, read_parquet, to_parquet

EXPORTS = sorted((Path(__file__).resolve().parents[2] / "results").glob("*/runs.parquet"))


@pytest.mark.parametrize("path", EXPORTS, ids=[p.parent.name for p in EXPORTS])
def test_a_committed_export_keeps_its_metadata_through_a_read_and_a_write(path, tmp_path):
    """What an export's metadata holds is what its frame holds and writes again; the second
    copy pyarrow kept of it (pandas attrs, then) is not restored onto the runs."""
    stored = json.loads(pq.read_schema(path).metadata[PARQUET_KEY])
    sweep = read_parquet(path)
    assert sweep.runs.attrs == {}
    to_parquet(sweep, tmp_path / "again.parquet")
    again = json.loads(pq.read_schema(tmp_path / "again.parquet").metadata[PARQUET_KEY])
    assert again == sweep.metadata() and {k: again[k] for k in stored} == stored
    pd.testing.assert_frame_equal(read_parquet(tmp_path / "again.parquet").runs, sweep.runs, check_categorical=True)
