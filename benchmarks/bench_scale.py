"""How far the simulation scales on this machine: N clients, a sample of them per round.

    .venv/bin/python -m benchmarks.bench_scale --clients 10 50 100 1000 --per-round 50 --rounds 20
    .venv/bin/python -m benchmarks.bench_scale --clients 100 1000 --per-round 10 50 \
        --modes "allgather c=0.01" --state-stores memory disk --rounds 10 \
        --run-config 'model="mlp-11m" synthetic-test-clients=10'

For each N, each mode (dense; Allgather Top-k at c = 0.01) and each ``state-store``, one
simulation as ``make run`` starts it (its own SuperLink, Ray with one CPU per client actor, two
actors on two cores), on Synthetic(1, 1) data generated per client, with ``clients-per-round``
= min(per-round, N) (one per-round for every N, or one per N). ``--run-config`` goes over
every run (a model, the test split). Prints a Markdown table: wall seconds per round (median
and mean, rounds after the first), launch to exit, the peak of the resident memory of all the
run's processes at once (sampled every 0.1 s: driver, Ray workers, SuperLink), the largest the
state store's files came to (sampled every second), the machine's block-device reads and writes
per round over the run (``/proc/vmstat``: what reached the disk, not what the page cache
served), and the bytes one client keeps in its ``context.state`` after it trained (measured in
process for the same mode, in memory: Flower's simulation keeps every node's context in the
driver, so this times N is what the driver can come to hold without the store).
"""

from __future__ import annotations

import argparse
import itertools
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
from commands.run_config import format_overrides, parse_overrides, resolve_settings
from common.flower_patches import set_task_identity
from common.settings import PROJECT_ROOT
from server.records import read_rounds
from state.store import AUTO, STATE_STORES
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
    """One client's ``context.state`` after two rounds, in process (3 clients, all training,
    their vectors in memory)."""
    set_task_identity()
    overrides = mode | {"num-clients": 3, "num-server-rounds": 2, "state-store": "memory"}
    grid = InProcessGrid(resolve_settings(overrides | {"results-dir": str(tmp)}))
    run_server_app(grid)
    return max(state_bytes(ctx.state) for ctx in grid.contexts.values())


STORE_SAMPLE_S = 1.0


def paged_kib() -> tuple[int, int]:
    """KiB the machine has read from and written to its block devices since it started."""
    fields = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
    return int(fields["pgpgin"]), int(fields["pgpgout"])


def directory_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` (0 when it is gone)."""
    total = 0
    for path in root.rglob("*"):
        try:
            total += path.stat().st_size if path.is_file() else 0
        except FileNotFoundError:  # replaced between the listing and the stat
            continue
    return total


def run_once(overrides: dict[str, Any], out: Path) -> dict[str, float]:
    """One simulation in a child process, its memory and state store sampled; its figures."""
    store = out.parent / f"{out.name}-store"
    config = format_overrides(overrides | {"results-dir": str(out), "state-store-dir": str(store)})
    peaks = PeakRss()
    store_peak, stored_at = 0, 0.0
    began = time.perf_counter()
    read_before, written_before = paged_kib()
    with (out.parent / f"{out.name}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "commands.run", "--run-config", config],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        while proc.poll() is None:
            peaks.sample([proc.pid])
            if time.perf_counter() - stored_at >= STORE_SAMPLE_S:
                store_peak, stored_at = max(store_peak, directory_bytes(store)), time.perf_counter()
            time.sleep(SAMPLE_S)
    launch_s = time.perf_counter() - began
    read_after, written_after = paged_kib()
    if proc.returncode != 0:
        raise RuntimeError(f"the run failed (exit {proc.returncode}); see {out}.log")
    rounds = read_rounds(out)
    steps = per_round_wall_s(rounds)
    return {
        "median_s": statistics.median(steps),
        "mean_s": statistics.fmean(steps),
        "launch_s": launch_s,
        "peak_mb": peaks.total_kb / 1024,
        "store_mb": store_peak / 2**20,
        "read_mb_round": (read_after - read_before) / 1024 / len(rounds),
        "written_mb_round": (written_after - written_before) / 1024 / len(rounds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[10, 50, 100, 1000])
    parser.add_argument(
        "--per-round", type=int, nargs="+", default=[50], help="one for every N, or one per N"
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--state-stores", nargs="+", default=[AUTO], choices=list(STATE_STORES))
    parser.add_argument("--run-config", default="", help="overrides for every run")
    args = parser.parse_args(argv)
    if len(args.per_round) not in (1, len(args.clients)):
        parser.error("--per-round takes one value, or one per --clients")
    per_rounds = args.per_round * len(args.clients) if len(args.per_round) == 1 else args.per_round
    extra = parse_overrides(args.run_config)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        state = {
            m: client_state_bytes(COMMON | MODES[m] | extra, Path(tmp) / f"state-{i}")
            for i, m in enumerate(args.modes)
        }
        for n, wanted in zip(args.clients, per_rounds, strict=True):
            per_round = min(wanted, n)
            for mode, store in itertools.product(args.modes, args.state_stores):
                overrides = (
                    COMMON
                    | MODES[mode]
                    | extra
                    | {
                        "num-clients": n,
                        "clients-per-round": per_round if per_round < n else 0,
                        "num-server-rounds": args.rounds,
                        "seed": args.seed,
                        "state-store": store,
                    }
                )
                out = Path(tmp) / f"n{n}-{mode.replace(' ', '-')}-{store}"
                figures = run_once(overrides, out)
                rows.append((n, per_round, mode, store, figures))
                print(
                    f"N={n} ({per_round} a round), {mode}, state-store {store}: "
                    f"{figures['median_s']:.3f} s/round median, {figures['mean_s']:.3f} mean, "
                    f"launch to exit {figures['launch_s']:.0f} s, peak {figures['peak_mb']:.0f} "
                    f"MB, store {figures['store_mb']:.0f} MB",
                    flush=True,
                )
    print(
        f"\n{args.rounds} rounds; Synthetic(1, 1); robust = none; seed {args.seed}; "
        f"--run-config {args.run_config!r}"
    )
    print(
        "| clients | per round | mode | state-store | s/round median | s/round mean "
        "| launch to exit (s) | peak memory, all processes (MB) | state store on disk, peak (MB) "
        "| disk read / round (MB) | disk written / round (MB) | state per client (KB) "
        "| x N (MB) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, per_round, mode, store, f in rows:
        print(
            f"| {n} | {per_round} | {mode} | {store} | {f['median_s']:.3f} | {f['mean_s']:.3f} "
            f"| {f['launch_s']:.0f} | {f['peak_mb']:.0f} | {f['store_mb']:.0f} "
            f"| {f['read_mb_round']:.0f} | {f['written_mb_round']:.0f} "
            f"| {state[mode] / 1024:.0f} | {state[mode] * n / 2**20:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
