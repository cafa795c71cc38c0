import pytest

from dspark.schedule import load_or_measure_sps, prefix_schedule
from dspark.model import TargetLM
from tests.conftest import TARGETS


def test_appendix_a_early_stop():
    # paper Appendix A: a1 = 0.8, SPS(1)=1.0, SPS(2)=0.5, SPS(3)=0.45. Theta0 = 1.0 > Theta1 = 0.9,
    # so the scheduler stops before it could look at the second token (which would give 1.134)
    sps = {1: 1.0, 2: 0.5, 3: 0.45}
    assert prefix_schedule([[0.8, 0.9]], sps) == [0]
    assert prefix_schedule([[0.8, 0.0]], sps) == [0]


def test_two_requests_by_hand():
    # a = [[.9, .72], [.5, .25]]; Theta: 2.0 -> 2.61 -> 2.896 -> 2.884 (stop)
    sps = {2: 1.0, 3: 0.9, 4: 0.8, 5: 0.7, 6: 0.6}
    assert prefix_schedule([[0.9, 0.8], [0.5, 0.5]], sps) == [2, 0]


def test_flat_capacity_admits_everything_with_positive_survival():
    sps = {b: 1.0 for b in range(1, 20)}
    assert prefix_schedule([[0.9, 0.5, 0.0], [0.3, 0.3, 0.3]], sps) == [2, 3]


def test_equal_survival_keeps_slot_order():
    sps = {1: 1.0, 2: 0.9, 3: 0.8, 4: 0.7}
    # a = [1, 1, 0.5]: Theta 1.0 -> 1.8 -> 2.4 -> 2.45: slots admitted in order 1, 2, 3
    assert prefix_schedule([[1.0, 1.0, 0.5]], sps) == [3]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"confidences must be \(R, K\)"):
        prefix_schedule([0.5, 0.5], {1: 1.0})


@pytest.mark.parametrize("kind", TARGETS)
def test_sps_table_is_measured_once_and_reused(tmp_path, kind):
    """Measured on either target (the HF one keyed by its own architecture), then read back."""
    if kind == "hf":
        from dspark.hf_target import HFTarget, built_model

        target = HFTarget(built_model("qwen3-tiny", seq_len=64), (1, 2))
    else:
        target = TargetLM(32, 1, 4, 64)
    path = tmp_path / "sps.json"
    a = load_or_measure_sps(target, path, [1, 2, 4], context_len=8)
    assert set(a) == {1, 2, 4} and all(v > 0 for v in a.values())
    mtime = path.stat().st_mtime_ns
    assert load_or_measure_sps(target, path, [1, 2, 4], context_len=8) == a
    assert path.stat().st_mtime_ns == mtime
    assert ('\\"hf\\"' in path.read_text()) == (kind == "hf")  # keyed by the target's own architecture
