"""The dense strategy against Flower's own FedAvg, and its refusal of bad replies."""

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg

from tests.helpers import (
    TINY_SHAPES,
    last_round,
    reply_message,
    start_round,
    tiny_record,
    tiny_strategy,
    train_reply,
)
from wire.layout import Layout

pytestmark = pytest.mark.usefixtures("task_identity")


def _update_reply(update: ArrayRecord, partition_id: int, examples: int) -> RecordDict:
    return train_reply(partition_id, examples, update=update)


def test_dense_matches_flowers_fedavg_on_the_same_replies() -> None:
    rng = np.random.default_rng(0)
    n = 4
    global_arrays = tiny_record(rng)
    updates = [tiny_record(rng, 0.1) for _ in range(n)]
    examples = [32, 10, 7, 51]

    # Flower's FedAvg averages the clients' new models.
    fedavg_replies = []
    for i, (update, ex) in enumerate(zip(updates, examples, strict=True)):
        new_model = ArrayRecord(
            {k: Array(global_arrays[k].numpy() + update[k].numpy()) for k in TINY_SHAPES}
        )
        content = RecordDict({"arrays": new_model, "metrics": MetricRecord({"num-examples": ex})})
        fedavg_replies.append(reply_message(content, src_node_id=100 + i))
    expected, _ = FedAvg().aggregate_train(1, fedavg_replies)

    strategy = tiny_strategy(n)
    start_round(strategy, global_arrays, n)
    ours, _ = strategy.aggregate_train(
        1,
        [
            reply_message(_update_reply(u, i, ex), 100 + i)
            for i, (u, ex) in enumerate(zip(updates, examples, strict=True))
        ],
    )
    assert expected is not None and ours is not None
    for k in TINY_SHAPES:
        np.testing.assert_allclose(ours[k].numpy(), expected[k].numpy(), rtol=0, atol=1e-6)


def test_reply_order_does_not_change_the_result() -> None:
    rng = np.random.default_rng(1)
    global_arrays = tiny_record(rng)
    replies = [reply_message(_update_reply(tiny_record(rng), i, 5 + i), 100 + i) for i in range(3)]
    results = []
    for order in ([0, 1, 2], [2, 0, 1]):
        strategy = tiny_strategy(3)
        start_round(strategy, global_arrays, 3)
        arrays, _ = strategy.aggregate_train(1, [replies[j] for j in order])
        assert arrays is not None
        results.append(Layout.of_record(arrays).flatten(arrays))
    np.testing.assert_array_equal(results[0], results[1])


def _bad_replies(rng: np.random.Generator) -> dict[str, RecordDict]:
    good = tiny_record(rng)
    nan = tiny_record(rng)
    nan_w = nan["w"].numpy().copy()
    nan_w[0, 0] = np.nan
    nan["w"] = Array(nan_w)
    wrong_shape = ArrayRecord({"w": Array(np.zeros((3, 4), np.float32)), "b": good["b"]})
    wrong_dtype = ArrayRecord({"w": Array(np.zeros((4, 3), np.float64)), "b": good["b"]})
    return {
        "NaN or infinite": _update_reply(nan, 1, 5),
        "shape": _update_reply(wrong_shape, 1, 5),
        "dtype": _update_reply(wrong_dtype, 1, 5),
        "missing ArrayRecord": train_reply(1, 5),
        "missing MetricRecord": RecordDict({"arrays": good}),
        "num-examples": _update_reply(good, 1, 0),
        "partition-id": _update_reply(good, 7, 5),
    }


@pytest.mark.parametrize("reason", list(_bad_replies(np.random.default_rng(2))))
def test_bad_reply_is_refused_and_the_rest_renormalised(
    reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    rng = np.random.default_rng(3)
    global_arrays = tiny_record(rng)
    good_update = tiny_record(rng, 0.1)
    bad = _bad_replies(rng)[reason]
    strategy = tiny_strategy(2)
    start_round(strategy, global_arrays, 2)
    arrays, _ = strategy.aggregate_train(
        1, [reply_message(_update_reply(good_update, 0, 5), 100), reply_message(bad, 101)]
    )
    assert arrays is not None
    # Only the good client counts, with weight 1.
    for k in TINY_SHAPES:
        np.testing.assert_allclose(
            arrays[k].numpy(), global_arrays[k].numpy() + good_update[k].numpy(), atol=1e-7
        )
    stats = last_round(strategy)
    assert stats.num_clients == 1
    assert len(stats.refused) == 1 and stats.refused[0].startswith("node 101: ")  # one phase
    assert reason in stats.refused[0]


def test_all_refused_keeps_the_old_model() -> None:
    rng = np.random.default_rng(4)
    strategy = tiny_strategy(2)
    start_round(strategy, tiny_record(rng), 2)
    arrays, metrics = strategy.aggregate_train(
        1, [reply_message(None, 100, error="crashed"), reply_message(RecordDict(), 101)]
    )
    assert arrays is None and metrics is None  # Strategy.start then keeps the previous arrays
    assert last_round(strategy).num_clients == 0
    assert "crashed" in last_round(strategy).refused[0]


def test_bytes_and_virtual_time_come_from_the_messages() -> None:
    rng = np.random.default_rng(5)
    strategy = tiny_strategy(2)
    global_arrays = tiny_record(rng)
    start_round(strategy, global_arrays, 2)
    replies = [reply_message(_update_reply(tiny_record(rng), i, 10), 100 + i) for i in range(2)]
    strategy.aggregate_train(1, replies)
    stats = last_round(strategy)
    payload = 4 * (12 + 3)
    assert stats.bytes_down > 2 * payload and stats.bytes_down < 2 * (payload + 600)
    assert stats.bytes_up > 2 * payload and stats.bytes_up < 2 * (payload + 600)
    per_client_down = stats.bytes_down / 2
    per_client_up = stats.bytes_up / 2
    expected = 0.01 + per_client_down / 1e6 + 10 / 100.0 + 0.01 + per_client_up / 1e6
    assert stats.round_time_s == pytest.approx(expected)
    assert stats.virtual_time_s == pytest.approx(expected)
