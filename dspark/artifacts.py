"""The files a run leaves for people to look at, under `<out_dir>/artifacts/` (carried in
the final checkpoint, logged under `plots/` in MLflow): training curves, and the final
evaluation's accepted-length histogram, reliability diagram, STS temperatures and SPS table.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def training_curves(history: list[dict], art: Path) -> None:
    """val/bpb, train/loss and tf/tau against the step."""
    plt = _pyplot()
    art.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for ax, key in zip(axes, ("val/bpb", "train/loss", "tf/tau")):
        pts = [(h["step"], h[key]) for h in history if key in h and "step" in h]
        if pts:
            ax.plot(*zip(*pts), marker=".")
        ax.set_title(key)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(art / "training_curves.png", dpi=100)
    plt.close(fig)


def decoding_artifacts(art: Path, accepted: np.ndarray, K: int, conf, conf_sts, survived, temps, sps) -> None:
    """Accepted-length histogram, reliability diagram (raw and STS), STS temperatures and
    the SPS table, into `art`."""
    plt = _pyplot()
    art.mkdir(parents=True, exist_ok=True)
    hist = np.bincount(accepted, minlength=K + 1).tolist()
    (art / "accepted_length_hist.json").write_text(json.dumps({"accepted": list(range(K + 1)), "rounds": hist}))
    (art / "sts_temperatures.json").write_text(json.dumps([float(t) for t in temps]))
    (art / "sps_table.json").write_text(json.dumps({
        "what": "the target's verify speed: forward passes per second (SPS) by batch size, "
                "measured on this machine; Algorithm 1 reads it",
        "columns": {"batch_tokens": "tokens in one verify forward (requests x (1 + verified draft tokens))",
                    "steps_per_s": "forward passes per second (1/s)"},
        "rows": [{"batch_tokens": int(k), "steps_per_s": float(v)} for k, v in sorted(sps.items())]}, indent=1))
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(range(K + 1), hist)
    ax.set_xlabel("draft tokens accepted per round")
    ax.set_ylabel("rounds")
    ax.set_title("accepted length (temperature 1)")
    fig.tight_layout()
    fig.savefig(art / "accepted_length_hist.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    bins = np.linspace(0, 1, 11)
    for label, c in (("raw", conf), ("STS", conf_sts)):
        cum = np.cumprod(c, axis=1).ravel()
        y = survived.ravel()
        idx = np.clip(np.digitize(cum, bins) - 1, 0, 9)
        xs = [cum[idx == b].mean() for b in range(10) if (idx == b).any()]
        ys = [y[idx == b].mean() for b in range(10) if (idx == b).any()]
        ax.plot(xs, ys, marker="o", label=label)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("predicted prefix survival  prod c_k")
    ax.set_ylabel("observed prefix survival")
    ax.set_title("reliability")
    ax.legend()
    fig.tight_layout()
    fig.savefig(art / "reliability.png", dpi=110)
    plt.close(fig)
