"""CPU a local federation burns, by kind of process: idle (what polling costs), or over the
rounds of a run (where a deployment round's time goes).

    python -m benchmarks.cpu_load --nodes 10 [--agents] [--short-polls]
    python -m benchmarks.cpu_load --nodes 10 --agents --short-polls --rounds 12 [--simulation]

Starts a SuperLink and the nodes as ``commands.federation`` does. Idle: waits
``--settle-s`` for every process to finish starting (agents import torch), then measures the
CPU time each kind of process uses over ``--window-s``. With ``--rounds N``: runs the scadles
preset for N rounds and measures from the end of round 2 to the end of round N. Prints cores
(1.0 = one core busy the whole window) and, for a run: the median wall seconds per round of
rounds 3-N (``wall_time_s`` in rounds.jsonl), CPU seconds per node-round by kind of process,
the SuperLink's requests per node-round by path (``benchmarks.count_requests``), and the resident
memory of each kind of process at the window's end. The SuperLink is one process: its CPU
seconds per round are a floor under the round's wall time. Measured: the processes alive at
both ends of the window (so a run needs ``--agents``); the request counts are the SuperLink's
file of counts, written every 0.5 s, read at both ends. ``--simulation`` first runs the same
configuration in Flower's simulation and prints its median too, and the difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.count_requests import WRITE_EVERY_S, read_counts
from benchmarks.peak_rss import kind
from benchmarks.round_overhead import per_round_wall_s
from commands.federation import Federation, NodeRuntime, deployment_overrides, local_federation
from commands.processes import process_tree
from commands.run import run as run_simulation
from commands.run_config import parse_overrides, resolve_settings
from server.records import read_rounds

RUN_CONFIG = "configs/scadles.toml"
CpuSeconds = dict[int, tuple[str, float]]  # pid -> (kind of process, CPU seconds so far)


def cpu_seconds(pids: set[int]) -> CpuSeconds:
    out = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        if (name := kind(pid)) is not None:
            out[pid] = (name, times.user + times.system)
    return out


def _federation_pids(federation: Federation) -> set[int]:
    pids: set[int] = set()
    for proc in federation.started:
        pids |= process_tree(proc.pid)
    return pids | (process_tree(os.getpid()) - {os.getpid()})  # the SuperLink and its children


def cpu_used(before: CpuSeconds, after: CpuSeconds) -> dict[str, float]:
    """CPU seconds by kind between two snapshots: a process that started in between counts
    with all it used, one that ended in between not at all."""
    used: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        used[name] = used.get(name, 0.0) + seconds - before.get(pid, (name, 0.0))[1]
    return used


def rounds_done(path: Path) -> int:
    """Complete lines of a run's ``rounds.jsonl`` (a line being written is not a round yet)."""
    if not path.exists():
        return 0
    with path.open() as fh:
        return sum(1 for line in fh if line.endswith("\n"))


def wait_for_round(path: Path, count: int, runner: threading.Thread) -> None:
    while rounds_done(path) < count:
        if not runner.is_alive():
            raise RuntimeError(f"the run ended before round {count}; see {path.parent}")
        time.sleep(0.05)


def resident_mb(pids: set[int]) -> dict[str, float]:
    """The largest resident set of a process of each kind, in MB."""
    out: dict[str, float] = {}
    for pid in pids:
        try:
            rss = psutil.Process(pid).memory_info().rss / 2**20
        except psutil.Error:
            continue
        if (name := kind(pid)) is not None:
            out[name] = max(out.get(name, 0.0), rss)
    return out


def median_round_s(results_dir: Path, first: int = 3) -> float:
    """Median wall seconds of rounds ``first``.. of a run (each round's own duration)."""
    steps = per_round_wall_s(read_rounds(results_dir))  # rounds 2, 3, ...
    return statistics.median(steps[first - 2 :])


@dataclass
class Window:
    """What was measured: CPU seconds of each process at its start and end, its length, and
    (for a run) the SuperLink's requests by path in it and each kind's memory at its end."""

    before: CpuSeconds
    after: CpuSeconds
    seconds: float
    requests: Counter[str] = field(default_factory=Counter)
    resident: dict[str, float] = field(default_factory=dict)

    def cores(self) -> dict[str, float]:
        return {
            name: used / self.seconds for name, used in cpu_used(self.before, self.after).items()
        }


def _measure_idle(federation: Federation, settle_s: float, window_s: float) -> Window:
    time.sleep(settle_s)
    pids = _federation_pids(federation)
    before, began = cpu_seconds(pids), time.monotonic()
    time.sleep(window_s)
    after = cpu_seconds(pids)
    return Window(before, after, time.monotonic() - began)


def _measure_run(
    federation: Federation, overrides: dict[str, object], rounds: int, counts_file: Path
) -> Window:
    """From the end of round 2 to the end of round ``rounds``."""
    records = Path(federation.settings.run.results_dir) / "rounds.jsonl"
    records.unlink(missing_ok=True)  # an earlier run's rounds are not this one's
    with open(os.devnull, "w") as quiet:
        runner = threading.Thread(
            target=federation.run_app, args=(overrides,), kwargs={"stream_to": quiet}
        )
        runner.start()
        try:
            wait_for_round(records, 2, runner)
            pids = _federation_pids(federation)  # the ServerApp is up by now
            before, began = cpu_seconds(pids), time.monotonic()
            requests_before = read_counts(counts_file)
            wait_for_round(records, rounds, runner)
            pids |= _federation_pids(federation)
            after, resident = cpu_seconds(pids), resident_mb(pids)
            seconds = time.monotonic() - began
            time.sleep(2 * WRITE_EVERY_S)  # the SuperLink's counts file catches up
            requests = read_counts(counts_file) - requests_before
            return Window(before, after, seconds, requests, resident)
        finally:
            runner.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--agents", action="store_true")
    parser.add_argument("--short-polls", action="store_true")
    parser.add_argument("--rounds", type=int, help="measure rounds 3..N of a run, not idle")
    parser.add_argument(
        "--simulation",
        action="store_true",
        help="with --rounds: first run the same configuration in simulation, for comparison",
    )
    parser.add_argument("--settle-s", type=float, default=50.0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/edgeflex-cpu-load"))
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 3:
        parser.error("--rounds must be at least 3 (rounds 1 and 2 are start-up)")
    if args.rounds is not None and not args.agents:
        parser.error(
            "--rounds needs --agents: a ClientApp process per message lives and dies within "
            "the window, and only processes alive at both ends are measured"
        )
    runtime = NodeRuntime(agents=args.agents, short_polls=args.short_polls)
    overrides = deployment_overrides(
        parse_overrides(
            f"{RUN_CONFIG} num-clients={args.nodes} num-server-rounds={args.rounds or 3} "
            f"results-dir={args.logs}"
        ),
        runtime,
    )
    simulated_s = None
    if args.simulation and args.rounds is not None:
        simulated = {**overrides, "results-dir": str(args.logs / "simulation")}
        with open(os.devnull, "w") as quiet:
            code, results = run_simulation(simulated, stream_to=quiet)
        if code != 0:
            raise SystemExit(f"the simulation run failed; see {results}")
        simulated_s = median_round_s(results)
    counts_file = args.logs / "superlink-requests.json"
    counts_file.unlink(missing_ok=True)
    superlink = [sys.executable, "-m", "benchmarks.count_requests", str(counts_file)]
    settings = resolve_settings(overrides)
    with local_federation(
        settings, args.logs, runtime=runtime, superlink_command=superlink
    ) as federation:
        if args.rounds is None:
            window = _measure_idle(federation, args.settle_s, args.window_s)
        else:
            window = _measure_run(federation, overrides, args.rounds, counts_file)
    label = f"{args.nodes} nodes, agents={args.agents}, short-polls={args.short_polls}"
    if args.rounds is None:
        print(f"{label}, idle: {window.seconds:.1f} s measured")
        _print_table(["process", "cores"], window.cores(), [1.0])
        return 0
    rounds = args.rounds - 2
    node_rounds = rounds * args.nodes
    median_s = median_round_s(Path(federation.settings.run.results_dir))
    print(
        f"{label}, rounds 3-{args.rounds}: {median_s:.2f} s per round (median; mean "
        f"{window.seconds / rounds:.2f})"
    )
    if simulated_s is not None:
        print(
            f"simulation of the same configuration: {simulated_s:.2f} s per round (median), "
            f"{median_s - simulated_s:+.2f} s per round here"
        )
    _print_table(
        ["process", "cores", "CPU s per node-round"],
        window.cores(),
        [1.0, window.seconds / node_rounds],
    )
    requests = {path: float(n) for path, n in window.requests.items()}
    _print_table(["SuperLink request", "per node-round"], requests, [1.0 / node_rounds])
    print("| process | resident MB (largest of its kind) |\n|---|---|")
    for name, mb in sorted(window.resident.items(), key=lambda item: -item[1]):
        print(f"| {name} | {mb:.0f} |")
    return 0


def _print_table(header: list[str], values: dict[str, float], scales: list[float]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, value in sorted(values.items(), key=lambda item: -item[1]):
        print(f"| {name} | " + " | ".join(f"{value * scale:.2f}" for scale in scales) + " |")
    total = sum(values.values())
    print("| total | " + " | ".join(f"{total * scale:.2f}" for scale in scales) + " |")


if __name__ == "__main__":
    sys.exit(main())
