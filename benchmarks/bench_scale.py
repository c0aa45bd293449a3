"""How far the simulation scales on this machine: N clients, a sample of them per round.

    .venv/bin/python -m benchmarks.bench_scale --clients 10 50 100 1000 --per-round 50 --rounds 20

For each N and each mode (dense; Allgather Top-k at c = 0.01), one simulation as ``make run``
starts it (its own SuperLink, Ray with one CPU per client actor, two actors on two cores), on
Synthetic(1, 1) data generated per client, with ``clients-per-round`` = min(per-round, N).
Prints a Markdown table: wall seconds per round (median and mean, rounds after the first),
launch to exit, the peak of the resident memory of all the run's processes at once (sampled
every 0.1 s: driver, Ray workers, SuperLink) and the bytes one client keeps in its
``context.state`` after it trained (measured in process for the same mode: Flower's simulation
keeps every node's context in the driver, so this times N is what the driver can come to hold).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, RecordDict

from benchmarks.peak_rss import SAMPLE_S, PeakRss
from benchmarks.round_overhead import per_round_wall_s
from commands.run_config import format_overrides, resolve_settings
from common.flower_patches import set_task_identity
from common.settings import PROJECT_ROOT
from server.records import read_rounds
from testing.in_process import InProcessGrid, run_server_app

_GRID = tomllib.loads((PROJECT_ROOT / "configs" / "measure" / "bench-scale.toml").read_text())
MODES: dict[str, dict[str, Any]] = _GRID["modes"]
COMMON: dict[str, Any] = _GRID["common"]


def state_bytes(state: RecordDict) -> int:
    """Bytes of the arrays a node keeps between rounds."""
    return sum(
        len(array.data)
        for record in state.values()
        if isinstance(record, ArrayRecord)
        for array in record.values()
    )


def client_state_bytes(mode: dict[str, Any], tmp: Path) -> int:
    """One client's ``context.state`` after two rounds, in process (3 clients, all training)."""
    set_task_identity()
    overrides = COMMON | mode | {"num-clients": 3, "num-server-rounds": 2}
    grid = InProcessGrid(resolve_settings(overrides | {"results-dir": str(tmp)}))
    run_server_app(grid)
    return max(state_bytes(ctx.state) for ctx in grid.contexts.values())


def run_once(overrides: dict[str, Any], out: Path) -> dict[str, float]:
    """One simulation in a child process, its memory sampled; its figures."""
    config = format_overrides(overrides | {"results-dir": str(out)})
    peaks = PeakRss()
    began = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "commands.run", "--run-config", config],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        while proc.poll() is None:
            peaks.sample([proc.pid])
            time.sleep(SAMPLE_S)
    launch_s = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"the run failed (exit {proc.returncode}); see {out}.log")
    steps = per_round_wall_s(read_rounds(out))
    return {
        "median_s": statistics.median(steps),
        "mean_s": statistics.fmean(steps),
        "launch_s": launch_s,
        "peak_mb": peaks.total_kb / 1024,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100, 1000])
    parser.add_argument("--per-round", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = {
            m: client_state_bytes(MODES[m], Path(tmp) / f"state-{i}")
            for i, m in enumerate(args.modes)
        }
        for n in args.clients:
            for mode in args.modes:
                per_round = min(args.per_round, n)
                overrides = (
                    COMMON
                    | MODES[mode]
                    | {
                        "num-clients": n,
                        "clients-per-round": per_round if per_round < n else 0,
                        "num-server-rounds": args.rounds,
                        "seed": args.seed,
                    }
                )
                out = Path(tmp) / f"n{n}-{mode.replace(' ', '-')}"
                figures = run_once(overrides, out)
                rows.append((n, per_round, mode, figures))
                print(
                    f"N={n} ({per_round} a round), {mode}: {figures['median_s']:.3f} s/round "
                    f"median, {figures['mean_s']:.3f} mean, launch to exit "
                    f"{figures['launch_s']:.0f} s, peak {figures['peak_mb']:.0f} MB",
                    flush=True,
                )
    print(f"\n{args.rounds} rounds; Synthetic(1, 1); robust = none; seed {args.seed}")
    print(
        "| clients | per round | mode | s/round median | s/round mean | launch to exit (s) "
        "| peak memory, all processes (MB) | state per client (KB) | x N (MB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n, per_round, mode, f in rows:
        print(
            f"| {n} | {per_round} | {mode} | {f['median_s']:.3f} | {f['mean_s']:.3f} "
            f"| {f['launch_s']:.0f} | {f['peak_mb']:.0f} | {state[mode] / 1024:.0f} "
            f"| {state[mode] * n / 2**20:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
