"""A node cannot speak for a partition bound to another node that is still there."""

import numpy as np
import pytest
from flwr.app import Message

from strategies.identity import Identities
from tests.helpers import reply_message, train_reply
from tests.strategies.test_dense import _record, _start_round, _strategy


def test_bound_on_first_accepted_reply_and_held() -> None:
    ids = Identities()
    ids.check(100, 0, {0: [100]}, connected={100, 101})
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="partition-id 0 belongs to node 100"):
        ids.check(101, 0, {0: [100, 101]}, connected={100, 101})
    with pytest.raises(ValueError, match="but this node is partition 0"):
        ids.check(100, 1, {1: [100]}, connected={100, 101})


def test_a_restarted_device_takes_its_partition_back_once_the_old_node_is_gone() -> None:
    ids = Identities()
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="belongs to node 100"):
        ids.check(105, 0, {0: [105]}, connected={100, 105})  # the old one still connected
    ids.check(105, 0, {0: [105]}, connected={105})
    ids.bind(105, 0)
    assert ids.owner_of == {0: 105} and ids.partition_of == {105: 0}


def test_an_unheld_partition_claimed_twice_goes_to_the_node_connected_longest() -> None:
    ids = Identities()
    ids.saw([102], server_round=1)
    ids.saw([101, 102, 103], server_round=2)
    claims = {2: [101, 102, 103]}
    connected = {101, 102, 103}
    ids.check(102, 2, claims, connected)  # seen since round 1: it takes the partition
    for late in (101, 103):  # refused alone, whatever their node ids
        with pytest.raises(ValueError, match="held by none; node 102, connected longest, takes"):
            ids.check(late, 2, claims, connected)
    ids.bind(102, 2)
    with pytest.raises(ValueError, match="belongs to node 102"):  # and it stays with 102
        ids.check(101, 2, {2: [101]}, connected)
    ids.saw([104, 105], server_round=3)  # first seen together: the lower node id
    ids.check(104, 3, {3: [105, 104]}, {104, 105})
    with pytest.raises(ValueError, match="node 104, connected longest"):
        ids.check(105, 3, {3: [105, 104]}, {104, 105})


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
