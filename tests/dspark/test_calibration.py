from pathlib import Path

import numpy as np
import pytest

from dspark.calibration import apply_sts, auroc, brier, ece, fit_sts, prefix_metrics


def _synthetic(n, K, rng):
    true_c = rng.uniform(0.3, 0.95, size=(n, K))
    logit = np.log(true_c) - np.log1p(-true_c)
    over = 1 / (1 + np.exp(-3.0 * logit))  # an over-confident head
    survived = (rng.uniform(size=(n, K)) < np.cumprod(true_c, axis=1)).astype(float)
    # prefix survival must be monotone: once rejected, later slots are rejected too
    survived = np.cumprod(survived, axis=1)
    return over, survived


def test_sts_lowers_ece_and_keeps_order():
    rng = np.random.default_rng(0)
    fit_c, fit_s = _synthetic(4000, 4, rng)
    test_c, test_s = _synthetic(4000, 4, rng)
    temps = fit_sts(fit_c, fit_s)
    cal = apply_sts(test_c, temps)
    for k in range(4):
        before = ece(np.cumprod(test_c, 1)[:, k], test_s[:, k])
        after = ece(np.cumprod(cal, 1)[:, k], test_s[:, k])
        assert after < before
        assert np.array_equal(np.argsort(cal[:, k], kind="stable"), np.argsort(test_c[:, k], kind="stable"))
    assert temps[0] > 1.5  # over-confidence is corrected by a temperature above 1


def test_metrics_on_known_values():
    assert ece([0.9, 0.9, 0.1, 0.1], [1, 0, 0, 0]) == pytest.approx((abs(0.9 - 0.5) * 2 + 0.1 * 2) / 4)
    assert brier([1.0, 0.0], [1, 1]) == pytest.approx(0.5)
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert auroc([0.5, 0.5], [0, 1]) == pytest.approx(0.5)
    assert np.isnan(auroc([0.2, 0.3], [1, 1]))


# Real decoding records of a trained tiny drafter (the demo's size: 24 prompts per split,
# K = 7): raw c_k per round and the observed prefix survival, on the validation and the
# calibration split. Regenerate with a `dspark train` run and `speculative_eval.decode_set`.
RECORDS = Path(__file__).resolve().parents[1] / "data" / "decode_records_tiny.npz"


def _records():
    d = np.load(RECORDS)
    return [d[k].astype(np.float64) for k in ("val_conf", "val_survived", "calib_conf", "calib_survived")]


def test_sts_on_real_records_does_not_chase_noise():
    val_c, val_s, cal_c, cal_s = _records()
    valid = np.ones_like(val_s, dtype=bool)
    before = prefix_metrics(val_c, val_s, valid, "")["ece_mean"]
    # the cause of STS raising held-out ECE: the bare argmin fits the sampling noise of a
    # small calibration split with extreme temperatures, and held-out ECE goes up
    bare = fit_sts(cal_c, cal_s, one_se=False)
    assert bare.max() / bare.min() > 10
    assert prefix_metrics(apply_sts(val_c, bare), val_s, valid, "")["ece_mean"] > before
    # the one-standard-error rule moves a slot only beyond the noise, and lowers it
    temps = fit_sts(cal_c, cal_s)
    assert np.all((temps > 0.5) & (temps < 2.0))
    assert prefix_metrics(apply_sts(val_c, temps), val_s, valid, "")["ece_mean"] < before


def test_sts_on_real_records_corrects_a_miscalibrated_head():
    val_c, val_s, cal_c, cal_s = _records()
    valid = np.ones_like(val_s, dtype=bool)

    def sharpen(c, f):
        logit = np.log(np.clip(c, 1e-6, 1 - 1e-6)) - np.log1p(-np.clip(c, 1e-6, 1 - 1e-6))
        return 1 / (1 + np.exp(-f * logit))

    over_val, over_cal = sharpen(val_c, 3.0), sharpen(cal_c, 3.0)  # an over-confident head
    before = prefix_metrics(over_val, val_s, valid, "")["ece_mean"]
    temps = fit_sts(over_cal, cal_s)
    after = prefix_metrics(apply_sts(over_val, temps), val_s, valid, "")["ece_mean"]
    assert after < 0.7 * before
    assert temps[0] > 1.5  # over-confidence is undone by a temperature above 1


def test_per_position_means_against_a_hand_computation():
    conf = np.array([[0.9, 0.5], [0.8, 0.9], [0.3, 0.2], [0.6, 0.7]])
    surv = np.array([[1, 1], [1, 0], [0, 0], [1, 0]], dtype=float)
    valid = np.ones_like(surv, dtype=bool)
    m = prefix_metrics(conf, surv, valid, "conf/")
    cum = np.cumprod(conf, axis=1)  # slot 2: 0.45, 0.72, 0.06, 0.42
    # ECE per slot by hand, 20 bins of width 0.05, each prediction alone in its bin
    ece1 = (abs(0.9 - 1) + abs(0.8 - 1) + abs(0.3 - 0) + abs(0.6 - 1)) / 4
    ece2 = (abs(0.45 - 1) + abs(0.72 - 0) + abs(0.06 - 0) + abs(0.42 - 0)) / 4
    assert m["conf/ece@1"] == pytest.approx(ece1)
    assert m["conf/ece@2"] == pytest.approx(ece2)
    assert m["conf/ece_mean"] == pytest.approx((ece1 + ece2) / 2)
    brier1 = np.mean((cum[:, 0] - surv[:, 0]) ** 2)
    brier2 = np.mean((cum[:, 1] - surv[:, 1]) ** 2)
    assert m["conf/brier_mean"] == pytest.approx((brier1 + brier2) / 2)
    # AUROC slot 1: positives 0.9, 0.8, 0.6 against the negative 0.3: 1.0; slot 2: one
    # positive 0.45 against 0.72, 0.06, 0.42: 2 of 3
    assert m["conf/auroc@1"] == pytest.approx(1.0)
    assert m["conf/auroc@2"] == pytest.approx(2 / 3)
    assert m["conf/auroc_mean"] == pytest.approx((1.0 + 2 / 3) / 2)
    # a slot whose AUROC is undefined (one outcome only) is left out of the mean
    surv_one = surv.copy()
    surv_one[:, 1] = 0
    m1 = prefix_metrics(conf, surv_one, valid, "")
    assert np.isnan(m1["auroc@2"]) and m1["auroc_mean"] == pytest.approx(1.0)
    # the pooled ECE mixes both slots in one set of bins
    assert m["conf/ece"] == pytest.approx(ece(cum.ravel(), surv.ravel()))
