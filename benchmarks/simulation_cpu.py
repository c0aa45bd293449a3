"""CPU a simulation burns per round, by kind of process: where a round's wall time goes when
the SuperLink's simulation, its Ray and the client actors share the cores.

    .venv/bin/python -m benchmarks.simulation_cpu --rounds 400 [--set collective=allgather ...]

Runs ``commands.run`` (the default run config and the ``--set`` overrides) and, once
``--skip`` rounds are recorded, takes the CPU time of every process it started at both ends of
``--window-s`` wall seconds, the rounds recorded in between (``benchmarks.cpu_load``'s
accounting). Prints the wall milliseconds per round and, per kind of process
(``benchmarks.peak_rss.kind``), CPU milliseconds per round. Other processes are not counted
but share the cores: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.cpu_load import CpuSeconds, cpu_seconds, cpu_used, rounds_done, wait_for_round
from commands import run as run_simulation
from commands.processes import process_tree
from commands.run_config import parse_overrides


def run_processes() -> CpuSeconds:
    """CPU seconds so far of every process this one started (the SuperLink, its simulation,
    Ray and the client actors), by kind."""
    return cpu_seconds(process_tree(os.getpid()) - {os.getpid()})


def measure(
    overrides: dict[str, object], rounds: int, skip: int, window_s: float
) -> tuple[int, float, dict[str, float]]:
    """(rounds in the window, its wall seconds, CPU seconds by kind in it) of a run of
    ``rounds`` rounds."""
    with tempfile.TemporaryDirectory(prefix="simulation-cpu-") as tmp:
        records = Path(tmp) / "run" / "rounds.jsonl"

        def launch() -> None:
            with (Path(tmp) / "run.log").open("w") as log:
                run_simulation.run(
                    overrides | {"num-server-rounds": rounds, "results-dir": str(records.parent)},
                    stream_to=log,
                )

        runner = threading.Thread(target=launch)
        runner.start()
        wait_for_round(records, skip, runner)
        before, first, began = run_processes(), rounds_done(records), time.monotonic()
        time.sleep(window_s)
        after, last, ended = run_processes(), rounds_done(records), time.monotonic()
        # its processes must outlive the window, or what they used in it is lost
        ended_inside = not runner.is_alive() or last >= rounds
        runner.join()
    if ended_inside or last <= first:
        raise RuntimeError("the run ended inside the window: make --rounds larger")
    return last - first, ended - began, cpu_used(before, after)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--skip", type=int, default=40, help="rounds before the window opens")
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    overrides = parse_overrides(" ".join(args.set))
    rounds, wall_s, used = measure(overrides, args.rounds, args.skip, args.window_s)
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
