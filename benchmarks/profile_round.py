"""Where a simulation round's time goes: the real ServerApp and ClientApp in one process,
profiled with cProfile, per round and part.

    .venv/bin/python -m benchmarks.profile_round --rounds 30

Runs a dense round and a compressed one (Allgather, c = 0.01) of the default MLP on digits, 10
clients, over ``testing.in_process``'s federation (every message serialized and parsed as on
the wire, the clients one after another), one BLAS and one torch thread as in Flower's
simulation. The profile starts at round ``--warm-up`` + 1 (data loading and first calls left
out). Prints per round and part the profiled milliseconds, the share of the profiled round
and the calls per round. cProfile inflates Python-heavy parts more than numeric ones, and a
busy machine inflates everything: read shares and call counts, not seconds.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from flwr.app import Message
from threadpoolctl import threadpool_limits

from common.flower_patches import set_task_identity
from common.settings import settings_with
from testing.in_process import InProcessGrid, run_server_app
from wire.keys import TRAIN

# (row, file the function is in, function name): the parts timed, client's then server's
PARTS = (
    ("client: every message, all of it", "flwr/clientapp/client_app.py", "__call__"),
    ("client: of which the model built (once per process)", "common/models.py", "build_model"),
    ("client: of which settings parsed", "common/settings/load.py", "parse"),
    ("client: of which local SGD", "client/training.py", "local_sgd"),
    ("server: plan and instructions", "strategies/edge.py", "configure_train"),
    ("server: replies checked and decoded", "strategies/acceptance.py", "accept"),
    ("server: clip-screen's screen", "strategies/policies/robust.py", "screen"),
    ("server: link estimates fitted", "timing/link_estimator.py", "_fit"),
    ("server: evaluation", "server/evaluation.py", "evaluate"),
    ("server: round record written", "server/records.py", "record_round"),
    ("in-process wire copies (tests only)", "testing/in_process.py", "_wire_copy"),
)
ROUND = ("strategies/edge.py", "aggregate_train")  # one call per round
WORKLOADS = {
    "dense": {},
    "compressed": {"collective": "allgather", "compression_ratio": 0.01},
}


class ProfiledGrid(InProcessGrid):
    """The in-process federation that starts ``profile`` with round ``start_round``'s
    training messages."""

    def __init__(self, profile: cProfile.Profile, start_round: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.profile, self.start_round, self.rounds_sent = profile, start_round, 0

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        messages = list(messages)
        if messages and messages[0].metadata.message_type == TRAIN:
            self.rounds_sent += 1
            if self.rounds_sent == self.start_round:
                self.profile.enable()
        return super().push_messages(messages)


@dataclass(frozen=True)
class Profiled:
    rounds: int
    total_s: float  # profiled seconds per round
    parts: dict[str, tuple[float, float]]  # row -> (seconds per round, calls per round)


def profile_run(workload: str, rounds: int, warm_up: int, clients: int) -> Profiled:
    profile = cProfile.Profile()
    with tempfile.TemporaryDirectory(prefix="profile-round-") as tmp:
        settings = settings_with(
            num_clients=clients,
            num_server_rounds=rounds,
            results_dir=str(Path(tmp) / workload),
            **WORKLOADS[workload],
        )
        run_server_app(ProfiledGrid(profile, warm_up + 1, settings=settings))
        profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]

    def summed(path: str, name: str) -> tuple[float, int]:
        found = [
            (cumulative, calls)
            for (file, _, function), (_, calls, _, cumulative, _) in stats.items()
            if function == name and file.endswith(path)
        ]
        return sum(c for c, _ in found), sum(n for _, n in found)

    _, profiled_rounds = summed(*ROUND)
    total_s = sum(t for _, _, t, _, _ in stats.values()) / profiled_rounds
    parts = {}
    for row, path, name in PARTS:
        seconds, calls = summed(path, name)
        parts[row] = (seconds / profiled_rounds, calls / profiled_rounds)
    return Profiled(profiled_rounds, total_s, parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warm-up", type=int, default=2)
    parser.add_argument("--clients", type=int, default=10)
    args = parser.parse_args(argv)
    if args.rounds <= args.warm_up:
        parser.error("--rounds must be more than --warm-up")
    restore = set_task_identity()
    threadpool_limits(1, user_api="blas")  # as common.flower_patches sets it in simulation
    torch.set_num_threads(1)
    try:
        runs = {
            name: profile_run(name, args.rounds, args.warm_up, args.clients) for name in WORKLOADS
        }
    finally:
        restore()
    print(f"\n{args.clients} clients, rounds {args.warm_up + 1}-{args.rounds} profiled")
    print("| part, per round | " + " | ".join(f"{n} ms | share | calls" for n in runs) + " |")
    print("|---|" + "---:|---:|---:|" * len(runs))
    total = " | ".join(f"{1e3 * r.total_s:.0f} | 100 % | " for r in runs.values())
    print(f"| profiled round | {total} |")
    for row, _, _ in PARTS:
        cells = []
        for run in runs.values():
            seconds, calls = run.parts[row]
            cells.append(f"{1e3 * seconds:.1f} | {100 * seconds / run.total_s:.0f} % | {calls:.0f}")
        print(f"| {row} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
