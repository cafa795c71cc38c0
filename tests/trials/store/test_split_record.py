"""A sweep's sequential record past MLflow's 8,000-character tag limit: stored in parts with
a checked total (`trials.store.keys.split_tag`), read back whole by every reader, and a
damaged or missing part named in one line instead of a record cut short and believed."""

import json

import pytest

from analysis.publish import record_look
from analysis.sequential import Plan
from analysis.sweep_reader import load_runs
from tests.analysis.conftest import synthetic_sweep
from analysis.until_decided import recorded_plan as _recorded_plan
from trials.store.client import tracking_client
from trials.store.keys import PART_CHARS, SEQUENTIAL_TAG, read_split_tag, split_tag, sweep_parent


def _long_plan(looks: int) -> str:
    plan = Plan(400, 0.05)
    for blocks in range(4, 4 + looks):
        plan.look(f"fingerprint-of-{blocks}-blocks", blocks, {"spec_prompts": 32}, blocks / 400)
    return plan.to_json()


def _parent(uri: str, name: str):
    client = tracking_client(uri)
    return client, sweep_parent(client, client.get_experiment_by_name(name).experiment_id)


@pytest.fixture
def long_store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    synthetic_sweep(uri, name="long-record", replicates=2, failed=0)
    return uri


def test_a_record_far_past_8000_characters_is_read_back_whole(long_store):
    record = _long_plan(120)
    assert len(record) > 3 * 8000
    record_look(load_runs("long-record", long_store), long_store, record, "look 120", 120)
    client, parent = _parent(long_store, "long-record")
    tags = parent.data.tags
    assert max(len(v) for v in tags.values()) <= PART_CHARS  # nothing MLflow would cut
    assert json.loads(tags[SEQUENTIAL_TAG])["chars"] == len(record)
    assert load_runs("long-record", long_store).record.sequential == record  # the analysis' reader
    assert len(_recorded_plan(tags, 2, None, 0.05, False).looks) == 120  # augment's reader
    # a later, shorter record replaces it, and the parts of the old one go
    short = _long_plan(2)
    record_look(load_runs("long-record", long_store), long_store, short, "look 2", 2)
    client, parent = _parent(long_store, "long-record")
    assert parent.data.tags[SEQUENTIAL_TAG] == short
    assert not [k for k in parent.data.tags if k.startswith(f"{SEQUENTIAL_TAG}/")]


def test_a_damaged_or_missing_part_is_named_in_one_line(long_store):
    record_look(load_runs("long-record", long_store), long_store, _long_plan(60), "look 60", 60)
    client, parent = _parent(long_store, "long-record")
    parts = sorted(k for k in parent.data.tags if k.startswith(f"{SEQUENTIAL_TAG}/"))
    assert len(parts) >= 3
    client.set_tag(parent.info.run_id, parts[1], parent.data.tags[parts[1]][:-1] + "}")
    with pytest.raises(ValueError, match="parts hold .* that do not match its header") as e:
        load_runs("long-record", long_store)
    assert "\n" not in str(e.value) and "long-record" in str(e.value)
    client.delete_tag(parent.info.run_id, parts[2])
    with pytest.raises(ValueError, match=r"stored in \d+ parts and 1 are missing"):
        load_runs("long-record", long_store)


def test_a_write_cut_short_leaves_the_old_record_readable():
    old, new = "a" * (3 * PART_CHARS), "b" * (2 * PART_CHARS + 1)
    tags = split_tag(SEQUENTIAL_TAG, old)
    # the new value's parts landed, its header did not: the old header still names the old parts
    tags.update({k: v for k, v in split_tag(SEQUENTIAL_TAG, new).items() if k != SEQUENTIAL_TAG})
    assert read_split_tag(tags, SEQUENTIAL_TAG) == old
    assert split_tag(SEQUENTIAL_TAG, "short") == {SEQUENTIAL_TAG: "short"}
    assert read_split_tag({}, SEQUENTIAL_TAG) == ""
