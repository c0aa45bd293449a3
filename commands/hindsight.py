"""Time to targets just below the baseline's A20, against the best fixed ratio in hindsight.

    .venv/bin/python -m commands.hindsight flexcomm --below 0.01 0.003 \\
        --fixed 'allgather-c*' 'allreduce-c*'

For each group of a comparison's runs that share a baseline, each target is the baseline's A20
(the mean accuracy of its last 20 rounds, mean over seeds) minus a margin. Per run and seed:
the virtual seconds until the 5-round moving mean of accuracy first reaches it
(server/last_rounds.py). Per seed, the best fixed ratio in hindsight is the fastest of the
group's runs whose names match ``--fixed`` (shell patterns); a run's time over that one is
averaged over the seeds where both reached the target, and the seeds a run missed are counted.
``--field validation_accuracy`` reads the validation split instead of the test split, for
choices that must not see the test split (configs/compare/ratio-select.toml).
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from commands import compare_spec
from commands.compare import DEFAULT_OUT
from server.last_rounds import LastRounds, time_to_target
from server.records import read_rounds

Records = Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]]  # run -> seed -> rows


@dataclass(frozen=True)
class TargetRow:
    run: str
    a20: float  # mean over seeds
    seconds: dict[int, float | None]  # seed -> virtual s to the target (None: missed)
    vs_best_fixed: float | None  # mean over seeds of seconds / the best fixed run's
    best_fixed: dict[int, str | None]  # seed -> the fastest fixed run (None: none reached)

    @property
    def reached(self) -> int:
        return sum(s is not None for s in self.seconds.values())


def _a20(rows: Sequence[Mapping[str, Any]], field: str = "accuracy") -> float:
    return LastRounds.of([float(r[field]) for r in rows]).mean_accuracy


def _seconds(rows: Sequence[Mapping[str, Any]], target: float, field: str) -> float | None:
    hit = time_to_target([dict(r) for r in rows], target, field=field)
    return None if hit is None else hit[1]


def target_rows(
    records: Records,
    runs: Sequence[str],
    fixed: Sequence[str],
    target: float,
    field: str = "accuracy",
) -> list[TargetRow]:
    """One row per run of a group (``runs``), at one target; ``fixed``: the fixed-ratio runs;
    ``field``: the per-round accuracy read (the test split's unless told)."""
    seconds = {
        run: {s: _seconds(rows, target, field) for s, rows in records[run].items()} for run in runs
    }
    best: dict[int, tuple[float, str] | None] = {}
    for seed in {s for run in runs for s in records[run]}:
        reached = [(t, r) for r in fixed if (t := seconds[r].get(seed)) is not None]
        best[seed] = min(reached) if reached else None
    out = []
    for run in runs:
        ratios = [
            t / best_s[0]
            for seed, t in seconds[run].items()
            if t is not None and (best_s := best.get(seed)) is not None and best_s[0] > 0
        ]
        out.append(
            TargetRow(
                run=run,
                a20=statistics.fmean(_a20(rows, field) for rows in records[run].values()),
                seconds=seconds[run],
                vs_best_fixed=statistics.fmean(ratios) if ratios else None,
                best_fixed={s: None if b is None else b[1] for s, b in best.items()},
            )
        )
    return out


def markdown(rows: Sequence[TargetRow], target: float, label: str) -> str:
    """The table; "reached" counts over the seeds each run has records of."""
    lines = [
        f"{label}: target {target:.4f}",
        "",
        "| run | A20 | reached | virtual s to target | vs best fixed (mean over seeds) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        times = [t for t in row.seconds.values() if t is not None]
        cell = "-"
        if times:
            cell = f"{statistics.fmean(times):.1f}"
            cell += f" ± {statistics.stdev(times):.1f}" if len(times) > 1 else ""
        ratio = "-" if row.vs_best_fixed is None else f"{row.vs_best_fixed:.2f}x"
        lines.append(
            f"| {row.run} | {row.a20:.4f} | {row.reached}/{len(row.seconds)} | {cell} | {ratio} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("comparison", help="a name in configs/compare/ or a .toml path")
    parser.add_argument("--out", type=Path, default=None, help="default results/compare/NAME")
    parser.add_argument("--below", type=float, nargs="+", default=[0.01, 0.003])
    parser.add_argument(
        "--fixed", nargs="+", required=True, help="shell patterns of the fixed-ratio runs' names"
    )
    parser.add_argument(
        "--field", default="accuracy", help="per-round accuracy read, e.g. validation_accuracy"
    )
    args = parser.parse_args(argv)
    comparison = compare_spec.load(compare_spec.find(args.comparison))
    out = args.out or DEFAULT_OUT / comparison.name
    records: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for spec in comparison.runs:
        for seed in comparison.seeds:
            directory = out / spec.name / f"seed-{seed}"
            if (directory / "summary.json").exists():
                run_rows = read_rounds(directory)
                if run_rows and args.field not in run_rows[0]:
                    parser.error(f"{directory}: its rounds have no {args.field!r}")
                records.setdefault(spec.name, {})[seed] = run_rows
    groups: dict[str, list[str]] = {}
    for name, baseline in comparison.baselines().items():
        if name in records:
            groups.setdefault(baseline, []).append(name)
    for baseline, runs in groups.items():
        if baseline not in records:
            continue
        a20 = statistics.fmean(_a20(rows, args.field) for rows in records[baseline].values())
        fixed = [r for r in runs if any(fnmatch(r, pattern) for pattern in args.fixed)]
        for margin in args.below:
            target = a20 - margin
            rows = target_rows(records, runs, fixed, target, args.field)
            label = f"{baseline} {args.field} A20 {a20:.4f} - {margin:g}"
            print(markdown(rows, target, label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
