"""Compare ``auto`` runs with the fixed collectives they choose between.

    .venv/bin/python -m benchmarks.compare_collectives FIXED_DIR [FIXED_DIR ...] AUTO_DIR [...]

Each run is named by its collective (``summary.json``'s configuration) and its directory.
Prints total communication time (virtual seconds spent transferring, compute excluded) of each
run, the per-round best of the fixed runs (Σ_r min over the fixed runs of their round r), how
far each run is above that, the rounds each run spent with each collective, and final
accuracies.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from collectives import COLLECTIVES
from common.settings import Settings, default_run_config
from common.settings.renamed import upgraded
from server.records import read_rounds


def collective_of(run_dir: Path) -> str:
    """The run's collective as its records name it ("dense" for a dense run)."""
    config = upgraded(json.loads((run_dir / "summary.json").read_text())["config"])
    known = {k: v for k, v in config.items() if k in set(Settings.keys())}  # older runs: defaults
    settings = Settings.from_run_config(default_run_config() | known, tables=False)
    return settings.collective.collective


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    collectives = [collective_of(run_dir) for run_dir in args.dirs]
    runs: list[tuple[str, list[dict[str, Any]]]] = [
        (f"{name} ({run_dir})", read_rounds(run_dir))
        for name, run_dir in zip(collectives, args.dirs, strict=True)
    ]
    fixed = [rows for name, (_, rows) in zip(collectives, runs, strict=True) if name in COLLECTIVES]
    if not fixed or len({len(rows) for _, rows in runs}) != 1:
        raise SystemExit("give at least one fixed collective, all runs of one number of rounds")
    best = sum(min(r["comm_time_s"] for r in same) for same in zip(*fixed, strict=True))
    print("| run | communication s | vs per-round best | final acc | rounds per collective |")
    print("|---|---|---|---|---|")
    for name, rows in runs:
        total = sum(r["comm_time_s"] for r in rows)
        chosen = ", ".join(
            f"{m} {n}" for m, n in sorted(Counter(r["collective"] for r in rows).items())
        )
        print(
            f"| {name} | {total:.2f} | {100 * (total / best - 1):+.1f} % | "
            f"{rows[-1]['accuracy']:.4f} | {chosen} |"
        )
    print(f"| per-round best of the fixed runs | {best:.2f} | | | |")


if __name__ == "__main__":
    main()
