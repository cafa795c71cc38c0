import numpy as np
import pytest

from dspark.calibration import apply_sts, auroc, brier, ece, fit_sts


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
