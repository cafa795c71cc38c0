"""Named capacity curves SPS(B) for Algorithm 1: the config field `sched_curve`.

- `measured` (the default): this machine's profiled table for the run's own target
  (`schedule.load_or_measure_sps`). On a CPU SPS(B) falls as 1/B from B = 1, so Algorithm 1
  verifies about one token per request: a degenerate curve for ranking arms.
- `roofline:<accelerator>:<size>` (`roofline:h200:8b`): a model, not a measurement. A
  target of N parameters in bf16 (W = 2N bytes) on an accelerator of memory bandwidth BW
  and peak dense bf16 F FLOP/s runs SPS(B) = 1 / max(W / BW, 2 N B / F) verify steps per
  second: flat (memory-bound) up to the knee B* = F W / (2 N BW), then falling as 1/B.
  With W = 2N the knee is F / BW whatever N (about 206 tokens on an H200); N only scales SPS.
- `table:<path>`: an SPS table file as `bench/gpu_check.py` writes it: a JSON object
  {"<batch_tokens>": steps_per_second, ..., "meta": {...}}.

Plain Python (no numpy, no torch): the config validates names with it.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

# (peak dense BF16 tensor FLOP/s without sparsity, HBM bandwidth in bytes/s), from the
# vendors' datasheets: NVIDIA H200 SXM 989.4 TFLOP/s and 4.8 TB/s; H100 SXM 989.4 TFLOP/s
# and 3.35 TB/s; A100 SXM 80 GB 312 TFLOP/s and 2.039 TB/s.
ACCELERATORS: dict[str, tuple[float, float]] = {
    "h200": (989.4e12, 4.8e12),
    "h100": (989.4e12, 3.35e12),
    "a100": (312e12, 2.039e12),
}
CURVE_KINDS = ("measured", "roofline:<accelerator>:<size>", "table:<path>")
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([mb])$", re.IGNORECASE)
META = "meta"


@dataclass(frozen=True)
class Curve:
    """A parsed `sched_curve` name."""

    kind: str  # measured | roofline | table
    accelerator: str = ""
    params: float = 0.0  # the roofline target's parameter count N
    path: str = ""


def parse_curve(name: str) -> Curve:
    """The curve a `sched_curve` value names; refused in one line naming the field."""
    if not isinstance(name, str):
        raise ValueError(f"sched_curve: expected a string, got {name!r}")
    if name == "measured":
        return Curve("measured")
    if name.startswith("table:"):
        if not name[len("table:"):].strip():
            raise ValueError("sched_curve: 'table:' needs a path, e.g. table:sps_table.json")
        return Curve("table", path=name[len("table:"):])
    parts = name.split(":")
    if parts[0] != "roofline":
        raise ValueError(f"sched_curve: unknown curve {name!r}; allowed: {', '.join(CURVE_KINDS)}")
    if len(parts) != 3 or parts[1] not in ACCELERATORS:
        raise ValueError(f"sched_curve: {name!r} is not roofline:<accelerator>:<size> with an accelerator "
                         f"among {', '.join(ACCELERATORS)} (e.g. roofline:h200:8b)")
    m = _SIZE.match(parts[2])
    params = float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6) if m else 0.0
    if params <= 0:
        raise ValueError(f"sched_curve: target size {parts[2]!r} in {name!r} is not a positive size like "
                         "8b, 70b, 1.5b or 350m")
    return Curve("roofline", accelerator=parts[1], params=params)


def roofline_sps(curve: Curve, batch: int) -> float:
    """Verify steps per second of a B-token step under the roofline model."""
    flops, bandwidth = ACCELERATORS[curve.accelerator]
    weights = 2.0 * curve.params  # bytes: bf16 weights, read once per step
    return 1.0 / max(weights / bandwidth, 2.0 * curve.params * batch / flops)


def roofline_knee(curve: Curve) -> float:
    """B* = F W / (2 N BW): the batch in tokens where the step turns compute-bound."""
    flops, bandwidth = ACCELERATORS[curve.accelerator]
    return flops * 2.0 * curve.params / (2.0 * curve.params * bandwidth)


def describe_curve(name: str) -> dict:
    """What a report says about the run's curve: its name, kind, parameters, knee, and
    whether it is a model (`model: true`) or a measurement."""
    curve = parse_curve(name)
    if curve.kind == "measured":
        return {"name": name, "kind": "measured", "model": False,
                "what": "this machine's profiled SPS table for the run's own target"}
    if curve.kind == "table":
        _, meta = read_sps_table(curve.path)
        return {"name": name, "kind": "table", "model": False, "path": curve.path, "meta": meta,
                "what": "an SPS table measured elsewhere (bench/gpu_check.py)"}
    flops, bandwidth = ACCELERATORS[curve.accelerator]
    return {"name": name, "kind": "roofline", "model": True, "accelerator": curve.accelerator,
            "params": curve.params, "peak_bf16_flops": flops, "bandwidth_bytes_per_s": bandwidth,
            "knee_tokens": roofline_knee(curve), "flat_sps": roofline_sps(curve, 1),
            "what": "a roofline model, not a measurement: SPS(B) = 1 / max(2N / BW, 2 N B / F), flat up to "
                    "the knee, then 1/B (vendor datasheet peak dense BF16 and HBM bandwidth)"}


def read_sps_table(path: str | os.PathLike) -> tuple[dict[int, float], dict]:
    """(batch tokens -> steps per second, meta) from a table file; a malformed file is
    refused in one line naming it."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"SPS table {p}: no such file")
    try:
        raw = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"SPS table {p}: not JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"SPS table {p}: expected a JSON object {{\"<batch_tokens>\": steps_per_second, ...}}")
    meta = raw.get(META, {})
    if not isinstance(meta, dict):
        raise ValueError(f"SPS table {p}: \"meta\" must be an object")
    table = {}
    for key, value in raw.items():
        if key == META:
            continue
        if not key.isdigit() or int(key) < 1:
            raise ValueError(f"SPS table {p}: key {key!r} is not a batch size in tokens (an integer >= 1)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"SPS table {p}: SPS({key}) = {value!r} is not a positive number")
        table[int(key)] = float(value)
    if not table:
        raise ValueError(f"SPS table {p}: no rows")
    return table, meta


def write_sps_table(path: str | os.PathLike, table: Mapping[int, float], meta: dict) -> Path:
    """The table file `read_sps_table` reads (written whole, then renamed into place)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps({**{str(int(b)): float(v) for b, v in sorted(table.items())}, META: meta}, indent=1))
    os.replace(tmp, p)
    return p


def sps_lookup(sps: Mapping[int, float], batch: int) -> float:
    """SPS(B) from a profiled table; linear between profiled sizes, and beyond the largest
    one the table's last token throughput is held (steps/s falls as 1/B)."""
    if batch in sps:
        return float(sps[batch])
    keys = sorted(int(k) for k in sps)
    if batch < keys[0]:
        return float(sps[keys[0]])
    if batch > keys[-1]:
        return float(sps[keys[-1]]) * keys[-1] / batch
    hi = next(k for k in keys if k > batch)
    lo = max(k for k in keys if k < batch)
    w = (batch - lo) / (hi - lo)
    return float(sps[lo]) * (1 - w) + float(sps[hi]) * w


def measure_grid(largest: int) -> list[int]:
    """The batch sizes a measured curve profiles up to `largest`: 1, 2, 3, 4, 6, 8, 12, ...
    and `largest` itself (SPS between them is interpolated)."""
    grid = {largest}
    b = 1
    while b < largest:
        grid |= {b, min(largest, 3 * b // 2)}
        b *= 2
    return sorted(grid)


def curve_table(name: str, largest: int, measure: Callable[[list[int]], Mapping[int, float]]) -> dict[int, float]:
    """SPS(B) for every B in 1..largest on the named curve, so that Algorithm 1 reads each
    step exactly; `measure(sizes)` profiles this machine (the `measured` curve only)."""
    curve = parse_curve(name)
    if curve.kind == "roofline":
        return {b: roofline_sps(curve, b) for b in range(1, largest + 1)}
    sparse = read_sps_table(curve.path)[0] if curve.kind == "table" else measure(measure_grid(largest))
    return {b: sps_lookup(sparse, b) for b in range(1, largest + 1)}
