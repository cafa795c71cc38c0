"""The frozen target's features kept on disk (dspark/feature_cache.py, issue 59): a cached run
ends where the online run ends, the arms of a block read what the first computed, and a
file or manifest that is not this run's batch under this run's key is refused in one line."""

import json
from pathlib import Path

import pytest
import torch

from dspark.feature_cache import FeatureCache, FeatureCacheError, FeatureKey, MANIFEST
from dspark.model import TargetOutput
from dspark.train import Trainer, train
from tests.conftest import TARGETS, is_timing_metric, target_overrides, tiny

pytest.importorskip("safetensors")  # the `hf` extra, which make test and .ci/run install


@pytest.mark.parametrize("kind", TARGETS)
def test_cached_features_change_no_result_and_the_arms_of_a_block_share_them(corpus_dir, tmp_path, kind):
    kw = dict(data=(str(corpus_dir),), target_steps=10, draft_steps=12, eval_interval=6, **target_overrides(kind))
    online = train(tiny(out_dir=str(tmp_path / "online"), **kw))
    first = Trainer(tiny(out_dir=str(tmp_path / "first"), feature_cache=str(tmp_path / "fc"), **kw))
    cached = first.run()
    assert (first.features.misses, first.features.hits) == (12, 0)  # every batch computed once, and kept
    assert {k: v for k, v in cached.items() if not is_timing_metric(k)} == \
        {k: v for k, v in online.items() if not is_timing_metric(k)}  # bit for bit
    other_arm = Trainer(tiny(out_dir=str(tmp_path / "arm"), feature_cache=str(tmp_path / "fc"), window="shifted", **kw))
    other_arm.run()
    assert (other_arm.features.misses, other_arm.features.hits) == (0, 12)  # same seed, same batches: read
    [folder] = (tmp_path / "fc").iterdir()
    assert len(list(folder.glob("*.safetensors"))) == 12 and (folder / MANIFEST).is_file()
    reseeded = Trainer(tiny(out_dir=str(tmp_path / "r1"), feature_cache=str(tmp_path / "fc"), seed=1, **kw))
    reseeded.run()
    assert reseeded.features.hits == 0  # another block's seed draws other batches


def _key(**change) -> FeatureKey:
    return FeatureKey(**{"target": "{}", "weights": "w0", "layers": 2, "layer_ids": (0, 1), "corpus": "c0",
                         "length": 9, "batch": 2, **change})


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, 1000, (2,), generator=g)
    x = torch.randint(0, 256, (2, 9), generator=g)
    h = [torch.randn(2, 8, 4, generator=g) for _ in range(2)]
    return starts, x, TargetOutput(torch.zeros(2, 8, 256), h, torch.randn(2, 8, 4, generator=g))


def test_a_cache_that_is_not_this_batch_under_this_key_is_refused_in_one_line(tmp_path):
    head = torch.nn.Linear(4, 256, bias=False)
    starts, x, out = _batch()
    cache = FeatureCache(tmp_path, _key())
    assert cache.get(starts, x, head) is None
    cache.put(starts, x, out)
    got = cache.get(starts, x, head)
    assert torch.equal(got.hidden, out.hidden) and torch.equal(got.layer_hidden[1], out.layer_hidden[1])
    torch.testing.assert_close(got.logits, head(out.hidden))  # the logits: the LM head over the normed state
    other = FeatureCache(tmp_path, _key(weights="w1"))  # another target's weights: another folder, nothing read
    assert other.folder != cache.folder and other.get(starts, x, head) is None
    path = cache._file(starts)
    s2, x2, _ = _batch(1)
    assert cache.get(s2, x2, head) is None  # another batch: another file, not kept yet
    with pytest.raises(FeatureCacheError, match="its tokens are not the batch's windows"):
        cache.get(starts, x2, head)
    cache.put(s2, x2, out)
    cache._file(s2).replace(path)  # another batch's file under this batch's name
    with pytest.raises(FeatureCacheError, match="it holds another batch"):
        cache.get(starts, x, head)
    path.write_bytes(b"not safetensors")
    with pytest.raises(FeatureCacheError, match=f"feature_cache: {path}: not a safetensors file") as e:
        cache.get(starts, x, head)
    assert "\n" not in str(e.value)
    manifest = cache.folder / MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "corpus": "c9"}))
    with pytest.raises(FeatureCacheError, match=r"is not this run's \(corpus differ\): not read"):
        FeatureCache(tmp_path, _key())
    nan = TargetOutput(out.logits, out.layer_hidden, out.hidden * float("nan"))
    fresh = FeatureCache(tmp_path / "n", _key())
    fresh.put(starts, x, nan)
    with pytest.raises(FeatureCacheError, match=r"hidden is not a finite \(B, T, D\)"):
        fresh.get(starts, x, head)


def test_a_feature_cache_outside_the_drafter_stage_or_not_a_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="feature_cache: keeps a frozen target's features"):
        tiny(parallel_stage="backbone", aux_weight=0.5, feature_cache=str(tmp_path))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is not a folder"):
        tiny(feature_cache=str(tmp_path / "file"))
    assert Path(tiny(feature_cache=str(tmp_path / "new")).feature_cache).name == "new"  # made on first use
