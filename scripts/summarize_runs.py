"""Print a markdown table of finished runs: accuracy, rounds, bytes, virtual time.

    .venv/bin/python -m scripts.summarize_runs RESULTS_DIR [RESULTS_DIR ...] [--at-round N]

The first directory is the baseline for the uplink ratio. With ``--at-round N`` every run is
read up to round N (runs are deterministic, so this equals a run of N rounds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from server.records import read_rounds


def describe(results_dir: Path) -> str:
    config = json.loads((results_dir / "summary.json").read_text())["config"]
    if config["strategy"] == "dense":
        return "dense"
    mode = config["collective"]
    if mode == "allreduce":
        policy = config["index-policy"]
        mode += f" {config['leader']}" if policy == "leader" else f" {policy}"
    return f"topk {mode} c={config['compression-ratio']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--at-round", type=int, action="append", default=None)
    args = parser.parse_args()
    print(
        "| run | rounds | final acc | best acc | uplink MB | uplink vs first | downlink MB "
        "| virtual s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    baseline_up: float | None = None
    for results_dir in args.dirs:
        rows = read_rounds(results_dir)
        for limit in sorted({min(n, len(rows)) for n in args.at_round or [len(rows)]}):
            part = [r for r in rows if r["round"] <= limit]
            up = sum(r["bytes_up"] for r in part) / 1e6
            down = sum(r["bytes_down"] for r in part) / 1e6
            baseline_up = up if baseline_up is None else baseline_up
            acc = [r["accuracy"] for r in part]
            print(
                f"| {describe(results_dir)} | {len(part)} | {acc[-1]:.4f} | {max(acc):.4f} "
                f"| {up:.2f} | {baseline_up / up:.1f}x fewer | {down:.2f} "
                f"| {part[-1]['virtual_time_s']:.1f} |"
            )


if __name__ == "__main__":
    main()
