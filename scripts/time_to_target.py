"""Virtual time for each run to first reach a target test accuracy.

    .venv/bin/python -m scripts.time_to_target --target 0.95 DIR [DIR ...]

Prints a markdown table: final accuracy, the first round at or above the target, the virtual
time at that round, and that time relative to the fastest run that reached it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from server.records import read_rounds


def time_to_target(rows: list[dict[str, float]], target: float) -> tuple[int, float] | None:
    for row in rows:
        if row["accuracy"] >= target:
            return int(row["round"]), float(row["virtual_time_s"])
    return None


def label(run_dir: Path) -> str:
    """A run's name in the table: a comparison's ``<run>/seed-<n>`` directories keep the run."""
    if run_dir.name.startswith("seed-"):
        return f"{run_dir.parent.name}/{run_dir.name}"
    return run_dir.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    results = {d: read_rounds(d) for d in args.dirs}
    reached = {d: time_to_target(rows, args.target) for d, rows in results.items()}
    fastest = min((r[1] for r in reached.values() if r is not None), default=None)
    print(f"| run | final acc | round at {args.target:.3f} | virtual s to target | vs fastest |")
    print("|---|---|---|---|---|")
    for d, rows in results.items():
        hit = reached[d]
        if hit is None or fastest is None:
            print(f"| {label(d)} | {rows[-1]['accuracy']:.4f} | not reached | | |")
        else:
            print(
                f"| {label(d)} | {rows[-1]['accuracy']:.4f} | {hit[0]} | {hit[1]:.1f} "
                f"| {hit[1] / fastest:.2f}x |"
            )


if __name__ == "__main__":
    main()
