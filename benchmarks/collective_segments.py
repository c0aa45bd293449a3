"""Which collective ``auto`` chose in each segment of a run's network schedule, and what it
predicted for each.

    .venv/bin/python -m benchmarks.collective_segments RUN_DIR [RUN_DIR ...]

For each run (its ``summary.json`` names the network preset) and each segment of the preset
(the rounds from one change of every client's link to the next): the rounds each collective
ran, and the mean predicted round time of each collective over the segment's rounds that
predicted (``predicted`` in ``rounds.jsonl``). A markdown table.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from common.settings import PROJECT_ROOT
from server.records import read_rounds
from timing.network import load_schedule


def segments(run_dir: Path, rounds: int) -> list[tuple[int, int, str]]:
    """(first round, last round, link) of each segment of the run's schedule."""
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    schedule = load_schedule(
        PROJECT_ROOT / config["networks-file"],
        config["network"],
        config["num-clients"],
        config["seed"],
    )
    starts = [(start, link) for start, link in schedule.all_clients if start <= rounds]
    if not starts:
        return [(1, rounds, "the devices' own links")]
    out = []
    for i, (start, link) in enumerate(starts):
        end = starts[i + 1][0] - 1 if i + 1 < len(starts) else rounds
        mbps = link.uplink_bytes_per_s * 8e-6
        out.append((start, end, f"{link.latency_s * 1e3:g} ms, {mbps:g} Mbit/s"))
    return out


def rows_of(run_dir: Path) -> list[str]:
    rows: list[dict[str, Any]] = read_rounds(run_dir)
    out = []
    for first, last, link in segments(run_dir, len(rows)):
        part = [r for r in rows if first <= r["round"] <= last]
        chosen = Counter(r["collective"] for r in part)
        predicted: dict[str, list[float]] = {}
        for r in part:
            for name, seconds in (r.get("predicted") or {}).items():
                predicted.setdefault(name, []).append(seconds)
        means = ", ".join(
            f"{name} {1e3 * sum(s) / len(s):.1f}" for name, s in sorted(predicted.items())
        )
        counts = ", ".join(f"{name} {n}" for name, n in sorted(chosen.items()))
        out.append(f"| {run_dir} | {first}-{last} | {link} | {counts} | {means} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args()
    print("| run | rounds | link | rounds per collective | mean predicted ms |")
    print("|---|---|---|---|---|")
    for run_dir in args.dirs:
        print("\n".join(rows_of(run_dir)))


if __name__ == "__main__":
    main()
