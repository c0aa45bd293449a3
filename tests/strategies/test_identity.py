"""A node cannot speak for a partition bound to another node that is still there."""

from collections import Counter

import numpy as np
import pytest
from flwr.app import Message

from strategies.identity import Identities
from tests.helpers import reply_message, train_reply
from tests.strategies.test_dense import _record, _start_round, _strategy


def test_bound_on_first_accepted_reply_and_held() -> None:
    ids = Identities()
    ids.check(100, 0, Counter({0: 1}), connected={100, 101})
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="partition-id 0 belongs to node 100"):
        ids.check(101, 0, Counter({0: 2}), connected={100, 101})
    with pytest.raises(ValueError, match="but this node is partition 0"):
        ids.check(100, 1, Counter({1: 1}), connected={100, 101})


def test_a_restarted_device_takes_its_partition_back_once_the_old_node_is_gone() -> None:
    ids = Identities()
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="belongs to node 100"):
        ids.check(105, 0, Counter({0: 1}), connected={100, 105})  # the old one still connected
    ids.check(105, 0, Counter({0: 1}), connected={105})
    ids.bind(105, 0)
    assert ids.owner_of == {0: 105} and ids.partition_of == {105: 0}


def test_an_unheld_partition_claimed_twice_goes_to_nobody() -> None:
    ids = Identities()
    with pytest.raises(ValueError, match="claimed by 2 nodes this round and held by none"):
        ids.check(101, 2, Counter({2: 2}), connected={101, 102})


@pytest.mark.usefixtures("task_identity")
def test_an_impostor_cannot_take_another_nodes_place() -> None:
    rng = np.random.default_rng(0)
    strategy = _strategy(3)
    updates = [_record(rng, 0.1) for _ in range(3)]

    def round_(server_round: int, replies: list[Message]) -> None:
        _start_round(strategy, _record(np.random.default_rng(9)), 3)
        strategy.current.server_round = server_round  # type: ignore[union-attr]
        strategy.aggregate_train(server_round, replies)

    honest = [reply_message(train_reply(i, 5, update=u), 100 + i) for i, u in enumerate(updates)]
    round_(1, honest)
    assert strategy.stats[1].num_clients == 3
    # Round 2: node 101 replies first, as partition 2; the real partition 2 (node 102) replies.
    impostor = reply_message(train_reply(2, 5, update=updates[1]), 101)
    round_(2, [impostor, honest[0], honest[2]])
    stats = strategy.stats[2]
    assert stats.num_clients == 2
    [refused] = stats.refused
    assert refused.startswith("node 101: partition-id 2") and "this node is partition 1" in refused
