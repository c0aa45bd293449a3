"""edgeflex's rounds against a minimal Flower FedAvg app on the same workload, alternately.

    .venv/bin/python -m benchmarks.bench_flower_fedavg --rounds 60 --pairs 2

Each run is a local simulation started the same way: a SuperLink of its own on a free loopback
port, ``flwr run ... --stream``, 10 simulated SuperNodes on Ray with one CPU each, then the
SuperLink stopped. The yardstick (``benchmarks/fedavg_app``) is Flower's FedAvg and
``Strategy.start`` with a ClientApp that does what edgeflex's dense client does (one SGD step on
32 samples of its digits partition, the same MLP) and centralized evaluation. edgeflex runs
twice a pair: dense (the default) and compressed (Allgather, compression-ratio = 0.01). Per
run: launch to exit (wall seconds around the whole launch), and the median and mean wall
seconds per round after the first (from the end of one round's evaluation to the next's). The
order reverses in every other pair, so no app always runs first on a warm disk cache. The ratio
of each edgeflex workload's round to FedAvg's is the median over the pairs of its per-round
median over FedAvg's.
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


# edgeflex's workloads: run-config overrides on the defaults (dense)
WORKLOADS: dict[str, dict[str, object]] = {
    "edgeflex dense": {},
    "edgeflex compressed": {"collective": "allgather", "compression-ratio": 0.01},
}
FEDAVG = "Flower FedAvg"


def run_edgeflex(app: str, rounds: int, clients: int, seed: int, out: Path) -> Measured:
    overrides = WORKLOADS[app] | {
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
        raise RuntimeError(f"the {app} run failed (exit {code}); see {out}")
    return Measured(app, launch_s, per_round_wall_s(read_rounds(out)))


def run_fedavg(app: str, rounds: int, clients: int, seed: int, out: Path) -> Measured:
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
    return Measured(app, launch_s, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    apps = [*WORKLOADS, FEDAVG]
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="bench-fedavg-") as tmp:
        for pair in range(args.pairs):
            for app in apps if pair % 2 == 0 else apps[::-1]:
                runner = run_fedavg if app == FEDAVG else run_edgeflex
                out = Path(tmp) / f"{app.replace(' ', '-')}-{pair}"
                measured = runner(app, args.rounds, args.clients, args.seed, out)
                results.append(measured)
                print(
                    f"pair {pair + 1}: {measured.app}: launch to exit {measured.launch_s:.1f} s, "
                    f"per round median {measured.median_s:.3f} s, mean {measured.mean_s:.3f} s",
                    flush=True,
                )
    print(f"\n{args.clients} clients, {args.rounds} rounds, {args.pairs} pairs")
    print("| app | launch to exit (s) | per round, median (s) | per round, mean (s) |")
    print("|---|---|---|---|")
    for app in apps:
        mine = [m for m in results if m.app == app]
        launches = ", ".join(f"{m.launch_s:.1f}" for m in mine)
        medians = ", ".join(f"{m.median_s:.3f}" for m in mine)
        means = ", ".join(f"{m.mean_s:.3f}" for m in mine)
        print(f"| {app} | {launches} | {medians} | {means} |")
    theirs = [m for m in results if m.app == FEDAVG]
    start_theirs = statistics.median(m.launch_s - sum(m.per_round_s) for m in theirs)
    print()
    for app in WORKLOADS:
        ours = [m for m in results if m.app == app]
        # each pair's ratio: edgeflex's round against the FedAvg run beside it
        ratio = statistics.median(
            o.median_s / t.median_s for o, t in zip(ours, theirs, strict=True)
        )
        start_ours = statistics.median(m.launch_s - sum(m.per_round_s) for m in ours)
        print(
            f"{app}: a round costs {ratio:.2f}x FedAvg's (median over the pairs); launch to "
            f"exit less the rounds after the first: {start_ours:.1f} s, FedAvg "
            f"{start_theirs:.1f} s ({start_ours - start_theirs:+.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
