"""edgeflex's dense run against a minimal Flower FedAvg app on the same workload, alternately.

    .venv/bin/python -m benchmarks.bench_flower_fedavg --rounds 60 --pairs 2

Both run as local simulations the same way: a SuperLink of their own on a free loopback port,
``flwr run ... --stream``, 10 simulated SuperNodes on Ray with one CPU each, then the SuperLink
stopped. The yardstick (``benchmarks/fedavg_app``) is Flower's FedAvg and ``Strategy.start``
with a ClientApp that does what edgeflex's dense client does (one SGD step on 32 samples of its
digits partition, the same MLP) and centralized evaluation. Per run: launch to exit (wall
seconds around the whole launch), and the median and mean wall seconds per round after the
first (from the end of one round's evaluation to the next's). The order alternates in each pair,
so neither always runs on a warm disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.round_overhead import per_round_wall_s
from commands import run as run_simulation
from common.settings import PROJECT_ROOT
from server.records import read_rounds

FEDAVG_APP = PROJECT_ROOT / "benchmarks" / "fedavg_app"


@dataclass(frozen=True)
class Measured:
    app: str
    launch_s: float
    per_round_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_round_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.per_round_s)


def run_edgeflex(rounds: int, clients: int, seed: int, out: Path) -> Measured:
    overrides = {
        "num-server-rounds": rounds,
        "num-clients": clients,
        "seed": seed,
        "results-dir": str(out),
    }
    began = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("w") as log:
        code, _ = run_simulation.run(overrides, stream_to=log)
    launch_s = time.perf_counter() - began
    if code != 0:
        raise RuntimeError(f"the edgeflex run failed (exit {code}); see {out}")
    return Measured("edgeflex dense", launch_s, per_round_wall_s(read_rounds(out)))


def run_fedavg(rounds: int, clients: int, seed: int, out: Path) -> Measured:
    out.mkdir(parents=True)
    times = out / "times.json"
    home = run_simulation.FLWR_DIR / f"bench-{os.getpid()}-{time.monotonic_ns()}"
    config = f'num-clients={clients} num-server-rounds={rounds} seed={seed} times-file="{times}"'
    began = time.perf_counter()
    try:
        with run_simulation.local_superlink(home, out / "superlink.log") as port:
            run_simulation.write_connection(home, port)
            with (out / "flower.log").open("wb") as log:
                code = subprocess.call(
                    [
                        "flwr",
                        "run",
                        str(FEDAVG_APP),
                        run_simulation.CONNECTION,
                        "--stream",
                        "--run-config",
                        config,
                        "--federation-config",
                        f"num-supernodes={clients} client-resources-num-cpus=1 "
                        "init-args-num-cpus=2 init-args-log-to-driver=false",
                    ],
                    env=run_simulation.flower_env(home),
                    cwd=PROJECT_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    launch_s = time.perf_counter() - began
    ends = json.loads(times.read_text())["round_ends"] if times.exists() else []
    if code != 0 or len(ends) != rounds + 1:
        raise RuntimeError(f"the FedAvg run failed (exit {code}); see {out / 'flower.log'}")
    steps = [b - a for a, b in zip(ends[1:], ends[2:], strict=False)]
    return Measured("Flower FedAvg", launch_s, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    runners = (run_edgeflex, run_fedavg)
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="bench-fedavg-") as tmp:
        for pair in range(args.pairs):
            order = runners if pair % 2 == 0 else runners[::-1]
            for runner in order:
                out = Path(tmp) / f"{runner.__name__}-{pair}"
                measured = runner(args.rounds, args.clients, args.seed, out)
                results.append(measured)
                print(
                    f"pair {pair + 1}: {measured.app}: launch to exit {measured.launch_s:.1f} s, "
                    f"per round median {measured.median_s:.3f} s, mean {measured.mean_s:.3f} s",
                    flush=True,
                )
    print(f"\n{args.clients} clients, {args.rounds} rounds, {args.pairs} pairs")
    print("| app | launch to exit (s) | per round, median (s) | per round, mean (s) |")
    print("|---|---|---|---|")
    for app in ("edgeflex dense", "Flower FedAvg"):
        mine = [m for m in results if m.app == app]
        launches = ", ".join(f"{m.launch_s:.1f}" for m in mine)
        medians = ", ".join(f"{m.median_s:.3f}" for m in mine)
        means = ", ".join(f"{m.mean_s:.3f}" for m in mine)
        print(f"| {app} | {launches} | {medians} | {means} |")
    ours = statistics.median(m.median_s for m in results if m.app == "edgeflex dense")
    theirs = statistics.median(m.median_s for m in results if m.app == "Flower FedAvg")
    start_ours = statistics.median(
        m.launch_s - sum(m.per_round_s) for m in results if m.app == "edgeflex dense"
    )
    start_theirs = statistics.median(
        m.launch_s - sum(m.per_round_s) for m in results if m.app == "Flower FedAvg"
    )
    print(
        f"\nper-round median: edgeflex {ours / theirs:.2f}x FedAvg's; launch to exit less the "
        f"rounds after the first: edgeflex {start_ours:.1f} s, FedAvg {start_theirs:.1f} s "
        f"({start_ours - start_theirs:+.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
