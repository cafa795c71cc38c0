"""bench/bpb_noise.py's arithmetic: the residual sigma of the additive arm + seed model and
the effects it prints, on values whose answer is known."""

import importlib.util
import itertools
import math
from pathlib import Path

import numpy as np

spec = importlib.util.spec_from_file_location("bpb_noise", Path(__file__).parents[1] / "bench" / "bpb_noise.py")
bpb_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bpb_noise)


def test_the_residual_sigma_and_effects_of_the_two_by_two():
    rng = np.random.default_rng(0)
    arm_effect = {"shifted/hidden": 0.0, "shifted/markov": -0.03, "aligned/hidden": 0.01, "aligned/markov": -0.02}
    noise = rng.normal(0, 0.01, size=(4, 3))
    rows = [{"setting": "steps400", "arm": a, "seed": s, "steps": 400, "train_min": 0.5, "eval_min@8": 0.1,
             "bpb@8": 3.0 + arm_effect[a] + 0.05 * s + noise[i, s]}
            for (i, a), s in itertools.product(enumerate(bpb_noise.ARMS), range(3))]
    sigma, df, effects = bpb_noise.residual_sigma(rows, "bpb@8")
    resid = noise - noise.mean(axis=1, keepdims=True) - noise.mean(axis=0, keepdims=True) + noise.mean()
    assert df == 6 and math.isclose(sigma, math.sqrt((resid ** 2).sum() / 6), rel_tol=1e-9)
    y = np.array([[r["bpb@8"] for r in rows if r["arm"] == a] for a in bpb_noise.ARMS]).mean(axis=1)
    assert math.isclose(effects["D1"], (y[2] + y[3] - y[0] - y[1]) / 2, rel_tol=1e-9)
    assert math.isclose(effects["D9"], (y[1] + y[3] - y[0] - y[2]) / 2, rel_tol=1e-9)
