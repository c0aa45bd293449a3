"""CPU a simulation burns per round, by kind of process: where a round's wall time goes when
the SuperLink's simulation, its Ray and the client actors share the cores.

    .venv/bin/python -m benchmarks.simulation_cpu --rounds 400 [--set collective=allgather ...]

Runs ``commands.run`` (the default run config and the ``--set`` overrides) and, once
``--skip`` rounds are recorded, takes the CPU time of every process on the machine at both ends
of ``--window-s`` wall seconds, the rounds recorded in between. Prints the wall milliseconds
per round and, per kind of process (``benchmarks.peak_rss.kind``; Ray's actors by their
title), CPU milliseconds per round. A process that started inside the window counts with what
it used in it, one that ended inside it not at all. The whole machine is measured: run it
otherwise idle.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil

from benchmarks.peak_rss import kind
from commands import run as run_simulation
from commands.run_config import parse_overrides

POLL_S = 0.2


def cpu_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (kind, CPU seconds so far) of every process that can be read."""
    found = {}
    for proc in psutil.process_iter(["name"]):
        try:
            times = proc.cpu_times()
            label = kind(proc.pid) or proc.info["name"]
        except psutil.Error:
            continue
        if label.startswith("ray::"):
            label = label.split(".")[0]
        found[proc.pid] = (label, times.user + times.system)
    return found


def rounds_recorded(results_dir: Path) -> int:
    """Complete lines of ``rounds.jsonl`` (a line being written is not a round yet)."""
    path = results_dir / "rounds.jsonl"
    if not path.exists():
        return 0
    with path.open() as fh:
        return sum(1 for line in fh if line.endswith("\n"))


def measure(
    overrides: dict[str, object], skip: int, window_s: float
) -> tuple[int, float, dict[str, float]]:
    """(rounds in the window, its wall seconds, CPU seconds by kind in it)."""
    with tempfile.TemporaryDirectory(prefix="simulation-cpu-") as tmp:
        results_dir = Path(tmp) / "run"
        outcome: dict[str, int] = {}

        def launch() -> None:
            with (Path(tmp) / "run.log").open("w") as log:
                outcome["code"], _ = run_simulation.run(
                    overrides | {"results-dir": str(results_dir)}, stream_to=log
                )

        runner = threading.Thread(target=launch)
        runner.start()
        while rounds_recorded(results_dir) < skip:
            if not runner.is_alive():
                raise RuntimeError(f"the run ended before round {skip} (exit {outcome})")
            time.sleep(POLL_S)
        before, first, began = cpu_by_process(), rounds_recorded(results_dir), time.monotonic()
        time.sleep(window_s)
        after, last, ended = cpu_by_process(), rounds_recorded(results_dir), time.monotonic()
        # its processes must outlive the window, or what they used in it is lost
        ended_inside = not runner.is_alive() or last >= int(overrides["num-server-rounds"])
        runner.join()
    if ended_inside or last <= first:
        raise RuntimeError("the run ended inside the window: make --rounds larger")
    return last - first, ended - began, cpu_used(before, after)


def cpu_used(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """CPU seconds by kind between two ``cpu_by_process`` snapshots: a process that started
    in between counts with all it used, one that ended in between not at all."""
    used: dict[str, float] = defaultdict(float)
    for pid, (label, seconds) in after.items():
        used[label] += seconds - before.get(pid, (label, 0.0))[1]
    return dict(used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--skip", type=int, default=40, help="rounds before the window opens")
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    overrides = parse_overrides(" ".join(args.set)) | {"num-server-rounds": args.rounds}
    rounds, wall_s, used = measure(overrides, args.skip, args.window_s)
    print(f"{rounds} rounds in {wall_s:.1f} s: {1e3 * wall_s / rounds:.1f} ms of wall time a round")
    print("| kind of process | CPU ms per round |")
    print("|---|---:|")
    for label, seconds in sorted(used.items(), key=lambda item: -item[1]):
        if seconds * 1e3 / rounds >= 0.5:
            print(f"| {label} | {1e3 * seconds / rounds:.1f} |")
    print(f"| all | {1e3 * sum(used.values()) / rounds:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
