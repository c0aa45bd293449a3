"""Bytes of a training instruction by model payload (full, delta, patch), from runs' records.

    .venv/bin/python -m benchmarks.payload_bytes results/compare/sampling/allgather-c0.01-*/seed-*

A round's record has the bytes sent down per phase and how many nodes got each payload, not
the bytes of each node's instruction; so only rounds in which every node got the same payload
are counted: their first phase's downlink bytes over the nodes. Prints, per run directory,
each payload's instructions over all rounds, and the rounds counted with their mean bytes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from server.records import read_rounds


def instructions(rows: Iterable[dict[str, Any]]) -> Counter[str]:
    """Nodes sent each payload, over all rounds."""
    total: Counter[str] = Counter()
    for row in rows:
        total.update(row.get("model_payloads") or {})
    return total


def bytes_per_instruction(rows: Iterable[dict[str, Any]]) -> dict[str, list[float]]:
    """Per payload: mean downlink bytes per node of each round where all nodes got it."""
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        payloads = row.get("model_payloads") or {}
        if len(payloads) == 1:
            ((kind, nodes),) = payloads.items()
            out[kind].append(row["phases"][0]["bytes_down"] / nodes)
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="results directories")
    args = parser.parse_args(argv)
    print("| run | payload | instructions | rounds counted | mean bytes per instruction |")
    print("|---|---|---|---|---|")
    for run in args.runs:
        rows = read_rounds(run)
        counted = bytes_per_instruction(rows)
        for kind, nodes in sorted(instructions(rows).items()):
            sizes = counted.get(kind, [])
            mean = f"{statistics.fmean(sizes):,.0f}" if sizes else "-"
            print(f"| {run} | {kind} | {nodes} | {len(sizes)} | {mean} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
