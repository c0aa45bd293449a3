"""Print a markdown table of finished runs: A20, S20 and M20, rounds, bytes, virtual time.

    .venv/bin/python -m commands.summarize_runs RESULTS_DIR [RESULTS_DIR ...] [--at-round N]
    .venv/bin/python -m commands.summarize_runs results/compare/batch-norm/*/seed-* \\
        --field recomputed_accuracy --field lagged_recomputed_accuracy

A20, S20 and M20 are the mean, the sd and the worst test accuracy of the last 20 rounds
(server/last_rounds.py); ``--field`` adds the same of another per-round accuracy of the
records (e.g. ``validation_accuracy``, or batch-norm-diagnosis's). The first directory is the
baseline for the uplink ratio. With ``--at-round N`` every run is read up to round N (runs are
deterministic, so this equals a run of N rounds).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collectives import COLLECTIVES
from common.settings import default_run_config
from common.settings.renamed import upgraded
from server.last_rounds import LastRounds
from server.records import read_rounds


def describe(results_dir: Path) -> str:
    """A run by its collective and what it sends: the collective's own settings, the selector
    and the encoding, and c."""
    defaults = default_run_config()  # for records from before a setting existed
    config = defaults | upgraded(json.loads((results_dir / "summary.json").read_text())["config"])
    mode = config["collective"]
    if mode in COLLECTIVES and not COLLECTIVES[mode].compressed:
        return mode
    own = COLLECTIVES[mode].own_settings if mode in COLLECTIVES else ()
    details = "".join(f" {key}={config[key]}" for key in own)
    sent = f"{config['selector']} {config['encoding']}"
    return f"{mode}{details} {sent} c={config['compression-ratio']}"


def ruler(rows: Sequence[Mapping[str, Any]], field: str) -> str:
    """'A20 | S20 | M20' of a per-round accuracy, '- | - | -' where the records lack it."""
    values = [float(r[field]) for r in rows if field in r]
    if not values:
        return "- | - | -"
    last = LastRounds.of(values)
    return f"{last.mean_accuracy:.4f} | {last.sd_accuracy:.4f} | {last.worst_accuracy:.4f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--at-round", type=int, action="append", default=None)
    parser.add_argument(
        "--field", action="append", default=[], help="another per-round accuracy to judge"
    )
    args = parser.parse_args(argv)
    fields = ["accuracy", *args.field]
    heads = " | ".join(f"{n} A20 | S20 | M20" for n in fields)
    print(f"| run | rounds | {heads} | uplink MB | uplink vs first | downlink MB | virtual s |")
    print("|---|---|" + "---|---|---|" * len(fields) + "---|---|---|---|")
    baseline_up: float | None = None
    for results_dir in args.dirs:
        if not (results_dir / "summary.json").exists():
            print(f"edgeflex: {results_dir}: not finished, left out", file=sys.stderr)
            continue
        rows = read_rounds(results_dir)
        name = f"{results_dir.parent.name}/{results_dir.name} ({describe(results_dir)})"
        for limit in sorted({min(n, len(rows)) for n in args.at_round or [len(rows)]}):
            part = [r for r in rows if r["round"] <= limit]
            up = sum(r["bytes_up"] for r in part) / 1e6
            down = sum(r["bytes_down"] for r in part) / 1e6
            baseline_up = up if baseline_up is None else baseline_up
            rulers = " | ".join(ruler(part, f) for f in fields)
            print(
                f"| {name} | {len(part)} | {rulers} | {up:.2f} | {baseline_up / up:.1f}x fewer "
                f"| {down:.2f} | {part[-1]['virtual_time_s']:.1f} |"
            )


if __name__ == "__main__":
    main()
