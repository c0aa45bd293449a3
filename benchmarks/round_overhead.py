"""Per-round wall-clock cost of runs, to compare the deployment runtime with simulation.

    python -m benchmarks.round_overhead /tmp/overhead/simulation /tmp/overhead/deployment

Prints, per results directory, a Markdown row: rounds, the median and mean wall-clock seconds
per round (from ``wall_time_s``, evaluation included), and for measured runs the medians of the
slowest client's download, busy (of which local SGD) and upload times in the training phase.
The first round is left out of the per-round figures (start-up: data loading, first imports,
node registration).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from server.records import read_rounds


def per_round_wall_s(rows: list[dict[str, Any]]) -> list[float]:
    """Wall-clock seconds of each round after the first."""
    times = [float(r["wall_time_s"]) for r in rows]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


def _median_part(rows: list[dict[str, Any]], part: str) -> float | None:
    values = [
        float(p[part])
        for r in rows[1:]
        for p in r.get("phases", [])
        if p.get("name") == "train" and part in p
    ]
    return statistics.median(values) if values else None


def summary_row(name: str, rows: list[dict[str, Any]]) -> str:
    steps = per_round_wall_s(rows)
    if not steps:
        raise ValueError(f"{name}: needs at least two rounds, has {len(rows)}")
    cells = [
        name,
        str(len(rows)),
        rows[-1].get("time_source", "modelled"),
        f"{statistics.median(steps):.2f}",
        f"{statistics.fmean(steps):.2f}",
    ]
    for part in ("download_s_max", "busy_s_max", "train_s_max", "upload_s_max"):
        value = _median_part(rows, part)
        cells.append("" if value is None else f"{value:.2f}")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="results directories")
    args = parser.parse_args(argv)
    print(
        "| run | rounds | times | median s/round | mean s/round "
        "| download (median) | busy (median) | of which SGD | upload (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.dirs:
        print(summary_row(path.name, read_rounds(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
