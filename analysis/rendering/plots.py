"""Plots of an attribution, saved as PNG (matplotlib, Agg): main effects, interactions,
Pareto chart of standardised effects, half-normal plot, per-slot acceptance per cell."""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from ..coded_design import levels  # noqa: E402
from ..effects import lenth  # noqa: E402


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main_effects(df: pd.DataFrame, response: str, factors: list[str], path) -> Path:
    fig, axes = plt.subplots(1, len(factors), figsize=(3.2 * len(factors), 3.2), sharey=True, squeeze=False)
    grand = df[response].mean()
    for ax, f in zip(axes[0], factors):
        lv = levels(df, f)
        g = df.groupby(f, observed=True)[response]
        means, ses = g.mean().reindex(lv), (g.std() / np.sqrt(g.count())).reindex(lv)
        ax.errorbar(range(len(lv)), means, yerr=ses, marker="o", capsize=3)
        ax.axhline(grand, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(lv)), [str(v) for v in lv])
        ax.set_title(f)
    axes[0][0].set_ylabel(f"{response}\n(level mean ± 1 s.e.)")
    fig.suptitle(f"main effects on {response}")
    return _save(fig, path)


def interactions(df: pd.DataFrame, response: str, factors: list[str], path) -> Path:
    pairs = list(itertools.combinations(factors, 2)) or [(factors[0], factors[0])]
    fig, axes = plt.subplots(1, len(pairs), figsize=(3.6 * len(pairs), 3.2), sharey=True, squeeze=False)
    for ax, (a, b) in zip(axes[0], pairs):
        la = levels(df, a)
        for lvb in levels(df, b):
            sub = df[df[b] == lvb]
            means = sub.groupby(a, observed=True)[response].mean().reindex(la)
            ax.plot(range(len(la)), means, marker="o", label=f"{b}={lvb}")
        ax.set_xticks(range(len(la)), [str(v) for v in la])
        ax.set_xlabel(a)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(response)
    fig.suptitle(f"interactions on {response}")
    return _save(fig, path)


def critical_label(alpha: float) -> str:
    """The Pareto line's legend: the level itself (a late look's 0.0007 read "100%" as 1 - alpha)."""
    return f"t crit (two-sided alpha {alpha:.3g})"


def pareto(effects: pd.DataFrame, path, alpha: float = 0.05, response: str = "") -> Path:
    """|t| of every effect, largest first, with the two-sided critical t; an unreplicated
    design uses |effect| / PSE with Lenth's margin of error."""
    e = effects.copy()
    if e["se"].notna().all():
        std = (e["effect"] / e["se"]).abs()
        line = stats.t.ppf(1 - alpha / 2, e["df_resid"].iloc[0])
        label = critical_label(alpha)
    else:
        L = lenth(e, alpha)
        std = e["effect"].abs() / L["pse"]
        line = L["me"] / L["pse"]
        label = "Lenth ME"
    std = std.sort_values()
    # one criterion everywhere: where adjusted p-values exist, red means p_adj < alpha (as
    # in the summary); the dashed line is then only the unadjusted reference
    if "p_adj" in e.columns and e["p_adj"].notna().all():
        red = [bool(e.loc[t, "p_adj"] < alpha) for t in std.index]
        label += ", unadjusted; red: p_adj < %g" % alpha
    else:
        red = [bool(v > line) for v in std]
    fig, ax = plt.subplots(figsize=(5.5, 0.35 * len(std) + 1.4))
    ax.barh(range(len(std)), std.to_numpy(), color=["C3" if r else "C0" for r in red])
    ax.set_yticks(range(len(std)), std.index)
    ax.axvline(line, color="k", ls="--", label=label)
    ax.set_xlabel("standardised effect")
    ax.legend(loc="lower right")
    ax.set_title(f"Pareto: {response}")
    return _save(fig, path)


HALF_NORMAL_LABELS = 6  # the largest effects named on a half-normal plot


def half_normal(effects: pd.DataFrame, path, response: str = "") -> Path:
    a = effects["effect"].abs().sort_values()
    m = len(a)
    q = stats.norm.ppf(0.5 + 0.5 * (np.arange(1, m + 1) - 0.5) / m)
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    ax.scatter(q, a.to_numpy())
    # the largest effects are the ones a reader looks for: only they are named, each label set
    # left of its point and apart from its neighbour's (the small ones crowd the origin, where
    # every label overlapped the next)
    named = list(zip(q, a.items()))[-HALF_NORMAL_LABELS:]
    for i, (x, (name, v)) in enumerate(named):
        ax.annotate(name, (x, v), fontsize=7, xytext=(-4, 6 if i % 2 else -10), textcoords="offset points",
                    ha="right")
    small = a.to_numpy()[: max(1, m // 2)]
    slope = np.median(small / q[: len(small)])
    ax.plot([0, q[-1]], [0, slope * q[-1]], "k--", lw=0.8)
    ax.set_xlabel("half-normal quantile")
    ax.set_ylabel("|effect|")
    ax.set_title(f"half-normal: {response}")
    return _save(fig, path)


def curves(df: pd.DataFrame, path, columns: list[str], title: str, by: str = "cell") -> Path:
    """One family's columns (`x@1`, `x@2`, ...: a registry row's declared `curve`) as a curve
    over their slots, mean over replicates, one line per cell."""
    family = columns[0].rsplit("@", 1)[0] if columns else ""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    if columns:
        k = [int(c.rsplit("@", 1)[1]) for c in columns]
        for cell, g in df.groupby(by, observed=True):
            ax.plot(k, g[columns].mean().to_numpy(), marker="o", label=str(cell))
        ax.set_xticks(k)
    values = df[columns].to_numpy(dtype=float) if columns else np.zeros(0)
    if values.size and np.nanmin(values) >= 0 and np.nanmax(values) <= 1:  # a probability's scale
        ax.set_ylim(0, 1.02)
    ax.set_xlabel("slot k")
    ax.set_ylabel(family)
    ax.legend(fontsize=6, loc="lower left")
    ax.set_title(f"{title} by cell")
    return _save(fig, path)


def residuals_vs_order(order: np.ndarray, resid: np.ndarray, response: str, path,
                       drift: tuple[float, float] | None = None) -> Path:
    """Residuals of the factorial model against launch order centred within each replicate
    block, with the drift check's own line (`analysis.diagnostics.drift_check`: the same slope and
    p as the report's text), since the blocks already absorb drift between blocks."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.scatter(order, resid, s=14)
    ax.axhline(0, color="grey", lw=0.8)
    if drift is not None and len(order) > 2 and np.ptp(order) > 0:
        slope, p = drift
        xs = np.array([order.min(), order.max()])
        ax.plot(xs, float(np.mean(resid)) + slope * (xs - float(np.mean(order))), "C3--", lw=1,
                label=f"drift within blocks: slope {slope:+.3g}/run, p={p:.2g}")
        ax.legend(fontsize=7)
    ax.set_xlabel("run order, centred within its replicate block")
    ax.set_ylabel("residual")
    ax.set_title(f"drift check: {response}")
    return _save(fig, path)


def residual_checks(fitted: np.ndarray, resid: np.ndarray, response: str, path) -> Path:
    """The model's assumptions at a glance: a normal probability plot of the residuals and
    the residuals against the fitted values (a funnel means the variances differ)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    (osm, osr), (slope, intercept, _) = stats.probplot(resid, dist="norm")
    a.scatter(osm, osr, s=14)
    a.plot(osm, intercept + slope * np.asarray(osm), "C3--", lw=1)
    a.set_xlabel("normal quantile")
    a.set_ylabel("residual")
    a.set_title("normal probability")
    b.scatter(fitted, resid, s=14)
    b.axhline(0, color="grey", lw=0.8)
    b.set_xlabel("fitted value")
    b.set_ylabel("residual")
    b.set_title("residuals against fitted")
    fig.suptitle(f"residuals: {response}", fontsize=9)
    return _save(fig, path)
