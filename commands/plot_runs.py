"""Overlay runs: test accuracy against virtual time, rounds or bytes, one curve per run name.

    .venv/bin/python -m commands.plot_runs RUN [RUN ...] --out FILE.png [--x rounds] [--title T]
    S=results/compare/scadles; .venv/bin/python -m commands.plot_runs $S/dsgd-S1 $S/scadles-S1 \\
        --out /tmp/s1.png

A RUN is a comparison's run, ``<out>/<run>/`` (every ``seed-<seed>/`` in it), one of its seeds,
``<out>/<run>/seed-<seed>/``, or any results folder. A curve is named by the run (the folder
above ``seed-<seed>/``), and the seeds of one name become its mean with a band of one standard
deviation (commands/curves.py says how seeds with different virtual times are averaged). Each
run is drawn in its method's colour (server/figure_style.py). Writes FILE.png and FILE.svg.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from commands import compare_plots, curves  # noqa: E402
from commands.run_dirs import seed_dirs  # noqa: E402
from server import figure_style  # noqa: E402
from server.records import read_rounds  # noqa: E402

Records = dict[str, list[list[dict[str, Any]]]]


def load(paths: Sequence[Path]) -> tuple[Records, dict[str, str]]:
    """The records of each run name (one list of rows per seed) and each name's method, in
    the order the names first appear. ValueError for a folder that is not a finished run."""
    records: Records = {}
    methods: dict[str, str] = {}
    for path in paths:
        for name, directory in seed_dirs(path):
            summary = directory / "summary.json"
            if not summary.exists():
                raise ValueError(f"{directory}: no summary.json (not finished)")
            method = figure_style.method_of(json.loads(summary.read_text())["config"])
            if methods.setdefault(name, method) != method:
                raise ValueError(f"{directory}: another method than the rest of {name!r}")
            records.setdefault(name, []).append(read_rounds(directory))
    return records, methods


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="a .png; the .svg goes beside it")
    parser.add_argument("--x", choices=tuple(curves.X_AXES), default="virtual_time_s")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    try:
        records, methods = load(args.runs)
    except ValueError as exc:
        raise SystemExit(f"edgeflex: {exc}") from None
    fig = compare_plots.accuracy_figure(records, methods, x_axis=args.x, title=args.title)
    for path in figure_style.save(fig, args.out):
        print(f"wrote {path}")
    plt.close(fig)


if __name__ == "__main__":
    main()
