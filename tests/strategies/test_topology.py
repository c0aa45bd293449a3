"""ring and tree topologies change only the charged time, never the model."""

import numpy as np
import pytest

from common.data import DIGITS_SPEC
from common.models import build_model
from server.build import build_strategy
from testing.in_process import InProcessGrid, train_in_process
from tests.helpers import Rounds, federation_settings, unit_clock
from timing.cost import Link, artopk_tree, ring_allreduce
from timing.devices import DeviceProfile
from wire.layout import Layout

pytestmark = pytest.mark.usefixtures("task_identity")
FAST = DeviceProfile("fast", 1000.0, 0.0, 4e6, 8e6, 0.002)
SLOW = DeviceProfile("slow", 500.0, 0.0, 1e6, 2e6, 0.02)


def _run(**overrides: object):  # type: ignore[no-untyped-def]
    settings = federation_settings(**overrides)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    strategy = build_strategy(settings, unit_clock({0: FAST, 1: SLOW, 2: FAST}), layout)
    rounds = Rounds()
    arrays = train_in_process(strategy, settings, model, InProcessGrid(settings), 2, rounds)
    return layout.flatten(arrays), rounds, layout.size


@pytest.mark.parametrize(
    "overrides",
    [
        {"collective": "dense"},
        {"collective": "allreduce", "compression_ratio": 0.05},
    ],
)
def test_same_model_different_charged_time(overrides: dict[str, object]) -> None:
    star, star_strategy, _ = _run(topology="star", **overrides)
    for topology in ("ring", "tree"):
        peer, strategy, _ = _run(topology=topology, **overrides)
        np.testing.assert_array_equal(peer, star)
        assert strategy[2].bytes_up == star_strategy[2].bytes_up
        assert strategy[2].round_time_s != star_strategy[2].round_time_s
        assert [p["name"] for p in strategy[2].phases] == ["compute", "exchange"]


def test_ring_and_tree_charge_the_papers_formulas_at_the_slowest_link() -> None:
    slowest = Link.from_bandwidth(latency_s=0.02, bytes_per_s=1e6)
    compute = 16 / 500.0  # the slow device computes 16 samples
    _, dense_ring, d = _run(collective="dense", topology="ring")
    assert dense_ring[1].round_time_s == pytest.approx(compute + ring_allreduce(3, 4 * d, slowest))
    _, topk_tree, d = _run(collective="allreduce", compression_ratio=0.05, topology="tree")
    assert topk_tree[1].round_time_s == pytest.approx(
        compute + artopk_tree(3, 4 * d, 0.05, slowest)
    )
