"""The size of each round's step when a run switches collective: a forced schedule in process.

    .venv/bin/python -m benchmarks.switch_steps --first allgather --then powersgd --at 40

10 clients on digits with the MLP at c = 0.01, the in-process federation (``testing.in_process``)
and ``robust = "none"``: rounds 1 to ``--at`` run ``--first``, the rest ``--then`` (the same
collective twice: no switch). Prints each round's aggregated step norm and training loss from
five rounds before the switch to ten after it.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np

from collectives.base import Aggregate
from common.data import DIGITS_SPEC
from common.flower_patches import set_task_identity
from common.models import build_model
from common.params import buffer_positions
from common.settings import settings_with
from server.build import build_strategy
from strategies.round_state import RoundState
from testing.in_process import InProcessGrid, Rounds, train_in_process
from timing.clock import VirtualClock
from timing.devices import DeviceProfile
from wire.codec import Sparse
from wire.layout import Layout

DEVICE = DeviceProfile("p", 1000.0, 0.0, 1e6, 2e6, 0.01)


class Forced:
    """A collective policy that runs ``first`` up to round ``at``, then ``then``."""

    predicted = None

    def __init__(self, first: str, then: str, at: int) -> None:
        self.first, self.then, self.at = first, then, at

    def choose(self, server_round: int, ratio: float, preferred: str | None) -> str:
        return self.first if server_round <= self.at else self.then


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--first", required=True)
    parser.add_argument("--then", required=True)
    parser.add_argument("--at", type=int, default=40)
    args = parser.parse_args()
    set_task_identity()
    settings = settings_with(collective="auto", compression_ratio=0.01, robust="none", seed=5)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    clock = VirtualClock(
        dict.fromkeys(range(settings.run.num_clients), DEVICE), flops_per_sample=1.0
    )
    strategy = build_strategy(settings, clock, layout, buffer_positions(model))
    forced = Forced(args.first, args.then, args.at)
    strategy.policies = replace(strategy.policies, collective=forced)  # type: ignore[arg-type]
    norms: dict[int, float] = {}
    apply = strategy._apply

    def measured(state: RoundState, aggregate: Aggregate) -> np.ndarray:
        update = aggregate.update
        if update is not None:
            values = update.values if isinstance(update, Sparse) else update.vector
            norms[state.server_round] = float(np.linalg.norm(values.astype(np.float64)))
        return apply(state, aggregate)

    strategy._apply = measured  # type: ignore[method-assign]
    last = args.at + 10
    recorded = Rounds()
    train_in_process(strategy, settings, model, InProcessGrid(settings), last, after_round=recorded)
    print("| round | collective | step norm | train loss |")
    print("|---|---|---|---|")
    for r in range(args.at - 4, last + 1):
        stats = recorded[r]
        print(f"| {r} | {stats.collective} | {norms.get(r, 0.0):.3f} | {stats.train_loss:.3f} |")


if __name__ == "__main__":
    main()
