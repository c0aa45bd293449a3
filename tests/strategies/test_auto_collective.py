"""collective = "auto" under the edge-scaled C1 schedule, in process."""

import numpy as np
import pytest

from collectives import COLLECTIVES
from collectives.allgather import Allgather
from collectives.allreduce import Allreduce
from collectives.allreduce.leaders import shared_index_factor
from collectives.allreduce.names import TOPK_NORM2
from collectives.base import Outlook, Participant
from common.data import DIGITS_SPEC
from common.models import build_model
from common.settings import PROJECT_ROOT, Settings
from server.build import build_strategy
from testing.in_process import InProcessGrid, train_in_process
from tests.helpers import Rounds, federation_settings, unit_clock
from timing.devices import MBPS, DeviceProfile
from timing.network import load_schedule
from wire.codec import topk_count
from wire.layout import Layout
from wire.train_reply import TrainReply

pytestmark = pytest.mark.usefixtures("task_identity")
DEVICE = DeviceProfile("pi", 2000.0, 0.0, 5 * MBPS, 5 * MBPS, 0.01)


@pytest.mark.slow  # a 60-round federation
def test_auto_follows_the_cost_models_across_c1_segments() -> None:
    settings = federation_settings(
        compression_ratio=0.01,
        collective="auto",
        auto_collectives="allreduce,allgather",
    )
    schedule = load_schedule(PROJECT_ROOT / "configs/networks.toml", "c1-edge", 3, seed=0)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    clock = unit_clock({i: DEVICE for i in range(3)}, schedule)
    strategy = build_strategy(settings, clock, layout)
    rounds = 120
    seen = Rounds()
    train_in_process(strategy, settings, model, InProcessGrid(settings), rounds, seen)
    k, d = topk_count(layout.size, 0.01), layout.size
    agree, flips = 0, 0
    previous = None
    for r in range(3, rounds + 1):
        stats = seen[r]
        true_links = list(schedule.profiles(r, {i: DEVICE for i in range(3)}).values())
        compute = [16 / DEVICE.train_flops_per_s] * 3
        union = min(d, 3 * k)
        best = (
            "allgather"
            if Allgather.predict_star_s(true_links, compute, k, union, d, 4 * k)
            <= Allreduce.predict_star_s(true_links, compute, k, d, 4 * k)
            else "allreduce"
        )
        agree += stats.collective == best
        flips += previous is not None and stats.collective != previous
        previous = stats.collective
        assert stats.predicted is not None and set(stats.predicted) == {"allgather", "allreduce"}
        assert stats.estimated_links is not None and len(stats.estimated_links) == 3
    print(f"auto agreed with the true-link models in {agree}/{rounds - 2} rounds, {flips} flips")
    assert flips >= 2  # C1-edge has regimes that favour each mode
    assert agree >= 0.9 * (rounds - 2)


@pytest.mark.slow  # NSGA-II solves over a federation
def test_nsga2_schedule_solves_after_warm_up_and_again_when_links_change() -> None:
    settings = federation_settings(
        compression_ratio=0.01,
        collective="auto",
        cr_schedule="nsga2",
        cr_warmup_rounds=3,
        cr_generations=10,
    )
    schedule = load_schedule(PROJECT_ROOT / "configs/networks.toml", "c1-edge", 3, seed=0)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    strategy = build_strategy(settings, unit_clock({i: DEVICE for i in range(3)}, schedule), layout)

    rounds = Rounds()
    train_in_process(strategy, settings, model, InProcessGrid(settings), 80, rounds)
    solves = [s.ratio_policy["ratio_solve"] for s in rounds.values() if s.ratio_policy]
    assert solves[0]["round"] == 4 and solves[0]["reason"] == "warm-up done"
    assert any(s["reason"] == "links changed" and 37 <= s["round"] <= 45 for s in solves)
    ratios = {r: s.compression_ratio for r, s in rounds.items()}
    assert all(ratios[r] == 0.01 for r in (1, 2, 3))
    assert all(0.001 <= c <= 0.1 for c in ratios.values())
    # 1 Mbit/s from round 37 makes bytes dear: the ratio after that solve is lower.
    assert ratios[60] < ratios[30]
    # With auto the solve decides the collective too, and the rounds follow it.
    solved_at = {s["round"]: s for s in solves}
    current = None
    for r in range(solves[0]["round"], 81):
        current = solved_at.get(r, current)
        assert current is not None
        assert rounds[r].collective == current["collective"]
    # Allreduce rounds measured the share of own Top-k energy at the leader's indices.
    factors = [s["shared_index_factor"] for s in solves]
    assert all(f is not None and 0 < f < 1 for f in factors)


def test_shared_index_factor_on_a_hand_computed_round() -> None:
    def participant(pid: int, examples: int, values: list[float], norm2: float) -> Participant:
        return Participant(
            node_id=pid,
            reply=TrainReply(pid, examples, 0.0, collective_metrics={TOPK_NORM2: norm2}),
            bytes_up=0,
            measured=None,
            contribution=np.asarray(values, dtype=np.float32),
        )

    leader = participant(0, 10, [3.0, 4.0], 25.0)  # its own Top-k: share 1
    other = participant(1, 30, [1.0, 0.0], 4.0)  # 1 of its Top-k energy 4: share 0.25
    every = np.ones(2, dtype=bool)
    assert shared_index_factor([leader, other], every) == pytest.approx((10 * 1 + 30 * 0.25) / 40)
    # A buffer in I (the second entry here) counts in neither ||e[I]||² nor ||TopK(e)||².
    first = np.array([True, False])
    assert shared_index_factor([leader, other], first) == pytest.approx(
        (10 * 9 / 25 + 30 * 0.25) / 40
    )


def _auto_run(settings_overrides: dict, rounds: int, clients: int = 3) -> dict:
    settings = federation_settings(
        **{
            "compression_ratio": 0.01,
            "collective": "auto",
            "num_clients": clients,
            **settings_overrides,
        }
    )
    schedule = load_schedule(PROJECT_ROOT / "configs/networks.toml", "c1-edge", 3, seed=0)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    clock = unit_clock({i: DEVICE for i in range(clients)}, schedule)
    strategy = build_strategy(settings, clock, layout)
    seen = Rounds()
    train_in_process(strategy, settings, model, InProcessGrid(settings), rounds, seen)
    return seen


def test_auto_takes_powersgd_where_its_predicted_round_is_the_shortest() -> None:
    """At c = 0.1 under c1-edge: on the 25 Mbit/s links PowerSGD's factors (no indices, and a
    downlink that does not grow with the clients' union) make the shortest round; from round
    37 (1 Mbit/s, 1 ms) Allreduce's values-only exchanges do. Every round after the first
    three takes the collective of least predicted time, and the records show each prediction."""
    stats = _auto_run(
        {"compression_ratio": 0.1, "auto_collectives": "allreduce,allgather,powersgd"},
        rounds=39,
        clients=4,
    )
    assert [stats[r].collective for r in (1, 2, 3)] == ["allreduce", "allgather", "powersgd"]
    for r in range(4, 40):
        predicted = stats[r].predicted
        assert predicted is not None and set(predicted) == {"allgather", "allreduce", "powersgd"}
        assert stats[r].collective == min(predicted, key=predicted.__getitem__)
    assert {stats[r].collective for r in range(4, 37)} == {"powersgd"}
    assert {stats[r].collective for r in (38, 39)} == {"allreduce"}
    assert not any(stats[r].refused for r in stats)


class Sixth(Allgather):
    """A fourth collective made in a test: Allgather's exchange under another name, predicted
    to cost nothing."""

    name = "sixth"

    def star_round_s(self, outlook: Outlook) -> float:
        return 0.0


def test_a_collective_added_to_the_table_is_considered_by_auto(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(COLLECTIVES, Sixth.name, Sixth)  # its one table line
    stats = _auto_run({"auto_collectives": "allgather,sixth"}, rounds=6)
    assert [stats[r].collective for r in range(1, 7)] == ["allgather", *["sixth"] * 5]
    assert stats[4].predicted is not None and stats[4].predicted["sixth"] == 0.0
    assert not any(stats[r].refused for r in stats)


def test_each_collective_owns_settings_that_exist_and_no_other_claims() -> None:
    owned = [key for half in COLLECTIVES.values() for key in half.own_settings]
    assert set(owned) <= set(Settings.keys())
    assert len(owned) == len(set(owned))
