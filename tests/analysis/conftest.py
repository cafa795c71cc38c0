import numpy as np
import pytest

from trials.validate import parse
from trials.tracking import open_ledger

FACTORS = {
    "D1": {"shifted": {"window": "shifted"}, "aligned": {"window": "aligned"}},
    "D2": {"const4": {"decay_gamma": 4.0}, "block": {"decay_gamma": "block"}},
    "D9": {"hidden": {"confidence_input": "hidden"}, "markov": {"confidence_input": "hidden+markov"}},
}
TRUE = {"D1": 1.0, "D9": 0.3, "D1:D9": -0.2}  # effects (high minus low); D2 is null


def synthetic_sweep(uri, name="synthetic", replicates=4, noise=0.05, seed=0, failed=1, controls=None):
    """Log a sweep with known effects into a real MLflow store through the trials' Ledger,
    the same code path the trials use."""
    raw = {"name": name, "base": {"preset": "tiny"}, "factors": FACTORS, "replicates": replicates}
    if controls:
        raw["controls"] = controls
    spec = parse(raw)
    ledger = open_ledger(uri, spec)
    rng = np.random.default_rng(seed)
    code = {"shifted": -1, "aligned": 1, "const4": -1, "block": 1, "hidden": -1, "markov": 1}
    for i, t in enumerate(spec.trials):
        run_id, _ = ledger.open_child(t, {"target_hash": "0" * 16})
        if t.arm.startswith("control"):
            y = 1.5 + rng.normal(0, noise)
        else:
            x = {f: code[t.levels[f]] for f in FACTORS}
            y = 3.0 + TRUE["D1"] / 2 * x["D1"] + TRUE["D9"] / 2 * x["D9"] + TRUE["D1:D9"] / 2 * x["D1"] * x["D9"]
            y += 0.02 * (t.replicate - 1) + rng.normal(0, noise)  # a small block effect
        ledger.log_metrics(run_id, {"spec/tau": y, "tf/tau": y + 0.5, "spec/accept@1": 0.9, "spec/accept@2": 0.7,
                                    "val/bpb": 2.0}, step=10)
        ledger.finish(run_id, "FAILED" if i < failed else "FINISHED", "boom" if i < failed else None)
    ledger.finish(ledger.parent_id, "FINISHED")
    return spec


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"
