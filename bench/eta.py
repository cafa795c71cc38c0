"""How far off a sweep's "~X left" was: reads the progress lines a `trials run` printed (a
saved log of it, `make demo` included) and, per sweep, compares each line's predicted end
(its clock plus the time it said was left) with the end the sweep reached (the clock of its
last "N/N done" line). Prints, at each quarter of the sweep's trials, the ratio of the
predicted to the actual total time (1.0: exact; below 1: optimistic), and the median over
every line that gave an estimate.

    make demo 2>&1 | tee demo.log; .venv/bin/python bench/eta.py demo.log
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys

LINE = re.compile(r"^\[(?P<sweep>\S+) (?P<done>\d+)/(?P<total>\d+) done (?P<clock>[0-9hms]+)"
                  r"(?:, ~(?P<left>[0-9hms?]+) left)?\]")


def seconds(text: str) -> float:
    """42s, 3m05s, 1h07m (trials.driver.progress.clock) in seconds."""
    found = dict((u, int(n)) for n, u in re.findall(r"(\d+)([hms])", text))
    return 3600 * found.get("h", 0) + 60 * found.get("m", 0) + found.get("s", 0)


def ratios(lines: list[str]) -> dict[str, list[tuple[int, int, float]]]:
    """Per sweep: (trials done, of total, predicted total / actual total) of each line with an
    estimate."""
    seen: dict[str, list[tuple[int, int, float, float | None]]] = {}
    for line in lines:
        m = LINE.match(line)
        if m:
            left = seconds(m["left"]) if m["left"] and "?" not in m["left"] else None
            seen.setdefault(m["sweep"], []).append((int(m["done"]), int(m["total"]), seconds(m["clock"]), left))
    out = {}
    for sweep, rows in seen.items():
        ends = [clock for done, total, clock, _ in rows if done == total]
        if not ends:
            continue
        actual = ends[-1]
        out[sweep] = [(done, total, (clock + left) / actual) for done, total, clock, left in rows
                      if left is not None and actual > 0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="a saved `trials run` (or `make demo`) output")
    args = p.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        found = ratios(f.read().splitlines())
    if not found:
        print(f"{args.log}: no finished sweep's progress lines", file=sys.stderr)
        return 2
    for sweep, rows in found.items():
        if not rows:
            print(f"{sweep}: no line gave an estimate")
            continue
        total = rows[0][1]
        quarters = []
        for q in (0.25, 0.5, 0.75):
            at = [r for d, _, r in rows if d >= q * total]
            quarters.append(f"{q:.0%} done {at[0]:.2f}" if at else f"{q:.0%} done -")
        print(f"{sweep}: predicted / actual total time: " + ", ".join(quarters)
              + f"; median over {len(rows)} lines {statistics.median(r for _, _, r in rows):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
