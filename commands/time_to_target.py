"""Virtual time for each run to first reach a target test accuracy (5-round moving mean).

    .venv/bin/python -m commands.time_to_target --target 0.95 DIR [DIR ...]

Prints a markdown table: A20 (mean accuracy of the last 20 rounds), the first round whose
moving mean is at or above the target, the virtual time at that round, and that time relative
to the fastest run that reached it (server/last_rounds.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from server.last_rounds import LastRounds, time_to_target
from server.records import read_rounds


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
    print(f"| run | A20 | round at {args.target:.3f} | virtual s to target | vs fastest |")
    print("|---|---|---|---|---|")
    for d, rows in results.items():
        hit = reached[d]
        a20 = LastRounds.of([r["accuracy"] for r in rows]).mean_accuracy
        if hit is None or fastest is None:
            print(f"| {label(d)} | {a20:.4f} | not reached | | |")
        else:
            print(f"| {label(d)} | {a20:.4f} | {hit[0]} | {hit[1]:.1f} | {hit[1] / fastest:.2f}x |")


if __name__ == "__main__":
    main()
