"""Export runs' records to TensorBoard event files: every number of every round, by round.

    .venv/bin/python -m commands.export_runs RUN [RUN ...] --out DIR [--to tensorboard]
    tensorboard --logdir DIR        (pip install tensorboard: the viewer is not a dependency)

A RUN is as for commands.plot_runs: ``<out>/<run>/`` (each of its seeds), one
``<out>/<run>/seed-<seed>/``, or any results folder. Each seed becomes the TensorBoard run
``<run>/seed-<seed>`` under DIR (a folder's own name when it is no seed). Its scalars: each
numeric field of ``rounds.jsonl`` (``accuracy``, ``loss``, ``bytes_up``, ...; a nested one as
``stream/buffer_samples_max``) at step = round, with the event's time set to the round's virtual
time, so TensorBoard's "Relative" axis reads virtual seconds since round 1. The resolved
configuration is a text summary, ``config``. TensorBoard keeps scalars as float32.

Written with tensorboardX (a small writer of TensorBoard's event files; TensorBoard itself with
its server and data-server binary is only needed to look, and in the tests to read them back).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter

from commands.run_dirs import SEED_DIR, seed_dirs
from server.records import read_rounds

STEP_FIELD = "round"  # the step, not a scalar


def scalars(row: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """(tag, value) of each number in a round's record, nested records as ``outer/inner``;
    lists (phases, refused), strings and nulls are not scalars."""
    for key, value in row.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from scalars(value, prefix=f"{tag}/")
        elif isinstance(value, int | float) and not isinstance(value, bool) and tag != STEP_FIELD:
            yield tag, float(value)


def write_tensorboard(results_dir: Path, out: Path) -> None:
    """One run's event file in ``out``."""
    summary = json.loads((results_dir / "summary.json").read_text())
    with SummaryWriter(logdir=str(out)) as writer:
        for row in read_rounds(results_dir):
            for tag, value in scalars(row):
                writer.add_scalar(
                    tag, value, global_step=row[STEP_FIELD], walltime=row["virtual_time_s"]
                )
        config = json.dumps(summary["config"], indent=1, sort_keys=True)
        writer.add_text("config", f"```\n{config}\n```", global_step=0, walltime=0.0)


EXPORTERS: dict[str, Callable[[Path, Path], None]] = {"tensorboard": write_tensorboard}


def targets(runs: Sequence[Path], out: Path) -> list[tuple[Path, Path]]:
    """(results folder, export folder) of each seed; ValueError before anything is written
    when one is not a finished run or was exported there already."""
    pairs = []
    for path in runs:
        for name, directory in seed_dirs(path):
            if not (directory / "summary.json").exists():
                raise ValueError(f"{directory}: no summary.json (not finished)")
            target = (
                out / name / directory.name if SEED_DIR.fullmatch(directory.name) else out / name
            )
            if target.exists() and any(target.iterdir()):
                raise ValueError(
                    f"{target}: exported there already; remove it or pick another --out"
                )
            pairs.append((directory, target))
    return pairs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--to", choices=tuple(EXPORTERS), default="tensorboard")
    args = parser.parse_args(argv)
    try:
        pairs = targets(args.runs, args.out)
    except ValueError as exc:
        raise SystemExit(f"edgeflex: {exc}") from None
    for directory, target in pairs:
        EXPORTERS[args.to](directory, target)
        print(f"edgeflex: {directory} -> {target}")


if __name__ == "__main__":
    main()
