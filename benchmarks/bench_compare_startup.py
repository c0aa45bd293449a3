"""Wall time per run of a comparison: the first run (it starts the SuperLink and Ray) and the
rest, on lanes (one SuperLink and one Ray for all runs) and, with ``--alone``, as before (each
run a ``commands.run`` with its own).

    .venv/bin/python -m benchmarks.bench_compare_startup [--modes lane alone] [--jobs 1]

Runs ``configs/compare/startup.toml`` (4 runs x 2 seeds x 5 rounds) into a fresh temporary
directory per mode. A run's time is from the previous run's end (the first: from the start of
the comparison) to its ``summary.json``; with ``--jobs 1`` that is one run after another.
Prints the load average beside the figures: on a busy machine they are not figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from commands import compare

COMPARISON = "startup"


def run_times(mode: str, jobs: int, root: Path) -> list[float]:
    """Seconds per run, in the order they finished."""
    out = root / mode
    began = time.time()
    argv = [COMPARISON, "--out", str(out), "--jobs", str(jobs)]
    if compare.main([*argv, "--alone"] if mode == "alone" else argv) != 0:
        raise RuntimeError(f"the comparison failed ({mode}); see the run.log files in {out}")
    ends = sorted(p.stat().st_mtime for p in out.glob("*/seed-*/summary.json"))
    return [end - start for start, end in zip([began, *ends], ends, strict=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modes", nargs="+", choices=["lane", "alone"], default=["lane"])
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        for mode in args.modes:
            load = os.getloadavg()[0]
            times = run_times(mode, args.jobs, Path(tmp))
            rows.append((mode, times, load, os.getloadavg()[0]))
    print("| mode | runs | first run s | later runs s (mean, max) | load before, after |")
    print("|---|---|---|---|---|")
    for mode, times, before, after in rows:
        rest = times[1:] or [float("nan")]
        print(
            f"| {mode} | {len(times)} | {times[0]:.1f} | {statistics.mean(rest):.1f}, "
            f"{max(rest):.1f} | {before:.1f}, {after:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
