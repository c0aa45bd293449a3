"""ScaDLES adaptive compression: the vote, the clients' statistic, the rounds it produces."""

import numpy as np
import pytest
from flwr.app import RecordDict

from client.reports import smoothed_residual_share
from collectives.base import Aggregate, Participant
from common.settings import ConfigError
from compress.gain import gain_curve
from strategies.policies.ratio import AdaptiveRatio
from tests.helpers import federation_settings, run_in_process
from wire.keys import RESIDUAL_SHARE
from wire.train_reply import TrainReply

pytestmark = pytest.mark.usefixtures("task_identity")


def test_residual_share_of_a_constructed_update() -> None:
    e = np.zeros(100, dtype=np.float32)
    e[:2] = [3.0, 4.0]  # ||e||² = 25; Top-1 keeps 16
    assert 1.0 - gain_curve(e, [0.01])[0] == pytest.approx(9 / 25)
    state = RecordDict()
    assert smoothed_residual_share(state, 0.5) == pytest.approx(0.5)
    assert smoothed_residual_share(state, 0.1) == pytest.approx(0.3 * 0.1 + 0.7 * 0.5)


def _voter(pid: int, share: float) -> Participant:
    reply = TrainReply(
        partition_id=pid,
        num_examples=10,
        train_loss=0.0,
        reports={} if share is None else {RESIDUAL_SHARE: share},
    )
    return Participant(node_id=pid, reply=reply, bytes_up=0, measured=None)


@pytest.mark.parametrize(
    ("shares", "compress"),
    [([0.1, 0.2, 0.9], True), ([0.1, 0.5, 0.9], False), ([0.3, 0.31], False), ([0.3], True)],
)
def test_majority_at_or_below_delta_compresses(shares: list[float], compress: bool) -> None:
    policy = AdaptiveRatio(ratio=0.1, delta=0.3)
    policy.observe([_voter(i, s) for i, s in enumerate(shares)], Aggregate([], None))
    assert policy.compress_next is compress
    assert policy.choose(2, times=None) == (0.1 if compress else 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(("delta", "compressed_rounds"), [(1.0, {2, 3, 4}), (1e-6, set())])
def test_rounds_follow_the_vote(delta: float, compressed_rounds: set[int]) -> None:
    settings = federation_settings(
        collective="allgather", compression_ratio=0.1, adaptive_delta=delta
    )
    _, strategy, _, stats = run_in_process(settings, rounds=4)
    ratios = {r: s.compression_ratio for r, s in stats.items()}
    assert ratios[1] == 1.0  # nothing reported yet: dense
    assert {r for r, c in ratios.items() if c < 1.0} == compressed_rounds
    assert all(c in (0.1, 1.0) for c in ratios.values())
    assert all(
        s.ratio_policy.get("adaptive") is not None and s.ratio_policy["adaptive"]["voters"] == 3
        for s in stats.values()
    )


def test_adaptive_delta_needs_a_fixed_topk_ratio() -> None:
    with pytest.raises(ConfigError, match="adaptive-delta needs a compressed collective"):
        federation_settings(collective="dense", adaptive_delta=0.3)
    with pytest.raises(ConfigError, match="cr-schedule = 'nsga2'"):
        federation_settings(collective="allgather", cr_schedule="nsga2", adaptive_delta=0.3)
