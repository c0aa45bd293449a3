"""A node cannot speak for a partition bound to another node that is still there."""

import numpy as np
import pytest
from flwr.app import Message

from strategies.identity import Identities
from tests.helpers import (
    last_round,
    reply_message,
    start_round,
    tiny_record,
    tiny_strategy,
    train_reply,
)


def test_bound_on_first_accepted_reply_and_held() -> None:
    ids = Identities()
    ids.check(100, 0, connected={100, 101})
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="partition-id 0 belongs to node 100"):
        ids.check(101, 0, connected={100, 101})
    with pytest.raises(ValueError, match="but this node is partition 0"):
        ids.check(100, 1, connected={100, 101})


def test_a_restarted_device_takes_its_partition_back_once_the_old_node_is_gone() -> None:
    ids = Identities()
    ids.bind(100, 0)
    with pytest.raises(ValueError, match="belongs to node 100"):
        ids.check(105, 0, connected={100, 105})  # the old one still connected
    ids.check(105, 0, connected={105})
    ids.bind(105, 0)
    assert ids.owner_of == {0: 105} and ids.partition_of == {105: 0}


def test_replies_are_judged_longest_connected_first() -> None:
    ids = Identities()
    ids.saw([102], server_round=1)
    ids.saw([101, 102, 103, 105, 104], server_round=2)
    order = sorted([105, 101, 104, 102, 103, 999], key=ids.seniority)
    assert order == [102, 101, 103, 104, 105, 999]  # then by node id; never seen: last


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("senior_passes", [True, False])
def test_an_unheld_partition_claimed_twice_goes_to_the_senior_claimant_that_passes(
    senior_passes: bool,
) -> None:
    """Nodes 100 and 102 both claim partition 0 in the first round (node 101 is partition 1):
    node 100, connected as long and lower, is judged first. If its reply passes, node 102 is
    refused alone; if it fails another check, node 102's honest reply binds the partition
    (refusing every claimant let a node that never binds keep a device out for the run)."""
    rng = np.random.default_rng(0)
    strategy = tiny_strategy(3)
    updates = [tiny_record(rng, 0.1) for _ in range(3)]
    start_round(strategy, tiny_record(np.random.default_rng(9)), 3)
    strategy.identities.saw([100, 101, 102], server_round=1)
    senior = train_reply(0, 5 if senior_passes else 10**9, update=updates[0])
    replies = [
        reply_message(train_reply(0, 5, update=updates[2]), 102),  # arrives first
        reply_message(train_reply(1, 5, update=updates[1]), 101),
        reply_message(senior, 100),
    ]
    strategy.aggregate_train(1, replies)
    [refused] = last_round(strategy).refused
    if senior_passes:
        assert refused.startswith("node 102: partition-id 0 belongs to node 100")
        assert strategy.identities.owner_of == {0: 100, 1: 101}
    else:
        assert refused.startswith("node 100: num-examples 1000000000 exceeds")
        assert strategy.identities.owner_of == {0: 102, 1: 101}
    assert last_round(strategy).num_clients == 2


@pytest.mark.usefixtures("task_identity")
def test_an_impostor_cannot_take_another_nodes_place() -> None:
    rng = np.random.default_rng(0)
    strategy = tiny_strategy(3)
    updates = [tiny_record(rng, 0.1) for _ in range(3)]

    def round_(server_round: int, replies: list[Message]) -> None:
        start_round(strategy, tiny_record(np.random.default_rng(9)), 3)
        strategy.current.server_round = server_round  # type: ignore[union-attr]
        strategy.aggregate_train(server_round, replies)

    honest = [reply_message(train_reply(i, 5, update=u), 100 + i) for i, u in enumerate(updates)]
    round_(1, honest)
    assert last_round(strategy).num_clients == 3
    # Round 2: node 101 replies first, as partition 2; the real partition 2 (node 102) replies.
    impostor = reply_message(train_reply(2, 5, update=updates[1]), 101)
    round_(2, [impostor, honest[0], honest[2]])
    stats = last_round(strategy)
    assert stats.num_clients == 2
    [refused] = stats.refused
    assert refused.startswith("node 101: partition-id 2") and "this node is partition 1" in refused
