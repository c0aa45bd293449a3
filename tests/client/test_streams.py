import numpy as np
import pytest
from flwr.app import RecordDict

from client.buffer import StreamBuffer, next_step
from client.streams import ReplayStream
from client.training import local_sgd
from common.data import DIGITS_SPEC, ArrayData
from common.models import build_model
from common.params import model_to_vector


def test_arrivals_match_the_rate_over_a_long_window() -> None:
    stream = ReplayStream(size=150, rate=37.5, seed=0)
    total, t = 0, 0.0
    rng = np.random.default_rng(0)
    while t < 1000.0:
        t += float(rng.uniform(0.01, 2.0))  # reads at irregular times
        total += stream.read_until(t).size
    assert abs(total - 37.5 * t) < 1.0  # never more than one sample off


def test_replay_covers_each_pass_once_in_a_new_order() -> None:
    stream = ReplayStream(size=50, rate=10.0, seed=3)
    first, second = stream.read_until(5.0), stream.read_until(10.0)
    assert sorted(first) == sorted(second) == list(range(50))
    assert not np.array_equal(first, second)  # reshuffled each pass


def test_time_until_lands_on_the_arrival_and_state_round_trips() -> None:
    stream = ReplayStream(size=100, rate=3.0, seed=1)
    stream.read_until(1.1)  # 3 arrived (at 1/3, 2/3, 1)
    wait = stream.time_until(4)  # the 7th arrives at 7/3 s
    assert 1.1 + wait == pytest.approx(7 / 3)
    assert stream.read_until(1.1 + wait).size == 4
    state = RecordDict()
    stream.to_state(state)
    again = ReplayStream.from_state(state, size=100, rate=3.0, seed=1)
    assert np.array_equal(again.read_until(10.0), stream.read_until(10.0))
    with pytest.raises(ValueError, match="before its last read"):
        stream.read_until(5.0)


def test_persistence_and_truncation_occupancy_by_hand() -> None:
    # 10 samples/s, a step every 2 s with a fixed batch of 8: 20 arrive per step.
    occupancy = {}
    for policy in ("persistence", "truncation"):
        stream, buffer = ReplayStream(1000, 10.0, seed=0), StreamBuffer(policy)
        steps = [
            next_step(stream, buffer, 2.0 * s, "fixed", batch_size=8, batch_min=8, batch_max=1024)
            for s in range(1, 6)
        ]
        assert all(step.wait_s == 0 and step.batch.size == 8 for step in steps)
        occupancy[policy] = ([s.occupancy for s in steps], len(buffer))
    # persistence: 20, 12 + 20, 24 + 20, ... keeps 12 more each step
    assert occupancy["persistence"] == ([20, 32, 44, 56, 68], 60)
    assert occupancy["truncation"] == ([20, 20, 20, 20, 20], 0)


def test_fixed_batch_waits_and_rate_batch_does_not() -> None:
    # 4 samples/s; a round starts every 1 s; batch 10.
    stream, buffer = ReplayStream(1000, 4.0, seed=0), StreamBuffer("persistence")
    step = next_step(stream, buffer, 1.0, "fixed", batch_size=10, batch_min=2, batch_max=64)
    assert step.wait_s == pytest.approx(1.5)  # the 10th sample arrives at 2.5 s
    assert step.batch.size == 10 and step.arrived == 10
    stream, buffer = ReplayStream(1000, 4.0, seed=0), StreamBuffer("truncation")
    step = next_step(stream, buffer, 1.0, "rate", batch_size=10, batch_min=2, batch_max=64)
    assert step.wait_s == 0 and step.batch.size == 4  # what arrived, no waiting
    step = next_step(stream, buffer, 1.25, "rate", batch_size=10, batch_min=2, batch_max=64)
    assert step.wait_s == pytest.approx(0.25) and step.batch.size == 2  # waits for the minimum
    step = next_step(stream, buffer, 100.0, "rate", batch_size=10, batch_min=2, batch_max=64)
    assert step.batch.size == 64 and len(buffer) == 0  # clamped; truncation drops the rest


def test_capacity_drops_oldest_and_bad_policies_are_named() -> None:
    buffer = StreamBuffer("persistence", capacity=5)
    buffer.add(np.arange(8))
    assert list(buffer.ids) == [3, 4, 5, 6, 7] and buffer.dropped == 3
    with pytest.raises(ValueError, match="buffer-policy = 'keep'"):
        StreamBuffer("keep")
    with pytest.raises(ValueError, match="batch-policy = 'big'"):
        next_step(
            ReplayStream(10, 1.0, 0), buffer, 1.0, "big", batch_size=1, batch_min=1, batch_max=1
        )


def test_relayed_samples_join_every_batch_of_the_round() -> None:
    rng = np.random.default_rng(0)
    features = DIGITS_SPEC.num_features
    data = ArrayData(rng.random((20, features), dtype=np.float32), rng.integers(0, 10, 20))
    extra = ArrayData(rng.random((5, features), dtype=np.float32), rng.integers(0, 10, 5))
    model = build_model("mlp", DIGITS_SPEC, seed=0)
    start = model_to_vector(model)
    batches = [np.arange(8), np.arange(8, 16)]
    with_extra = local_sgd(model, start, data, batches=batches, learning_rate=0.1, extra=extra)
    without = local_sgd(model, start, data, batches=batches, learning_rate=0.1)
    assert with_extra.num_examples == 16 + 2 * 5 and without.num_examples == 16
    assert not np.allclose(with_extra.update, without.update)
