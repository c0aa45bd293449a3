"""Compare an ``auto`` run with the two fixed collectives it chooses between.

    .venv/bin/python -m scripts.compare_collectives ALLGATHER_DIR ALLREDUCE_DIR AUTO_DIR

Prints total communication time (virtual seconds spent transferring, compute excluded) of
each run, the per-round best of the two fixed runs (Σ_r min(allgather_r, allreduce_r)), how
far ``auto`` is above that, the rounds ``auto`` spent in each mode, and final accuracies.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from server.records import read_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("allgather", type=Path)
    parser.add_argument("allreduce", type=Path)
    parser.add_argument("auto", type=Path)
    args = parser.parse_args()
    ag, ar, auto = (read_rounds(p) for p in (args.allgather, args.allreduce, args.auto))
    if not len(ag) == len(ar) == len(auto):
        raise SystemExit("the three runs must have the same number of rounds")
    best = sum(min(a["comm_time_s"], b["comm_time_s"]) for a, b in zip(ag, ar, strict=True))
    print("| run | communication s | vs per-round best | final acc | rounds per mode |")
    print("|---|---|---|---|---|")
    for name, rows in (("allgather", ag), ("allreduce", ar), ("auto", auto)):
        total = sum(r["comm_time_s"] for r in rows)
        modes = ", ".join(
            f"{m} {n}" for m, n in sorted(Counter(r["collective"] for r in rows).items())
        )
        print(
            f"| {name} | {total:.2f} | {100 * (total / best - 1):+.1f} % | "
            f"{rows[-1]['accuracy']:.4f} | {modes} |"
        )
    print(f"| per-round best of the fixed two | {best:.2f} | | | |")


if __name__ == "__main__":
    main()
