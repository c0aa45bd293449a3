"""Bad replies are refused, the rest renormalised, and the model never moves because of them."""

from collections.abc import Callable, Iterable

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from collectives.allreduce.names import PENDING_KEY
from common.data import DIGITS_SPEC
from common.models import build_model
from common.params import model_to_vector
from server.build import build_strategy
from state.vectors import load_vector
from testing.in_process import InProcessGrid
from tests.helpers import federation_settings, last_round, unit_clock
from timing.devices import DeviceProfile
from wire.codec import decode_indices, raw_array
from wire.layout import Layout

pytestmark = pytest.mark.usefixtures("task_identity")
PROFILE = DeviceProfile("p", 1000.0, 0.0, 1e6, 2e6, 0.01)
Corrupt = Callable[[RecordDict], RecordDict]


class CorruptingGrid(InProcessGrid):
    """Replaces the replies of chosen nodes with a corrupted copy."""

    def __init__(self, settings, corrupt: dict[int, Corrupt]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(settings)
        self.corrupt = corrupt

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = super().send_and_receive(messages, timeout=timeout)
        return [
            Message(content=self.corrupt[r.metadata.src_node_id](r.content), metadata=r.metadata)
            if r.metadata.src_node_id in self.corrupt
            else r
            for r in replies
        ]


def _sparse_with(content: RecordDict, **arrays: Array) -> RecordDict:
    record = ArrayRecord(dict(content.array_records["sparse"].items()))
    for name, array in arrays.items():
        if array is None:
            del record[name]
        else:
            record[name] = array
    out = RecordDict(dict(content.items()))
    out["sparse"] = record
    return out


def _values(content: RecordDict) -> np.ndarray:
    return np.frombuffer(content.array_records["sparse"]["values"].data, dtype="<f4").copy()


def _indices(content: RecordDict) -> np.ndarray:
    return decode_indices(content.array_records["sparse"], 50_826)


def _nan(c: RecordDict) -> RecordDict:
    v = _values(c)
    v[3] = np.nan
    return _sparse_with(c, values=raw_array(v))


def _out_of_range(c: RecordDict) -> RecordDict:
    i = _indices(c).astype(np.int32)
    i[0] = 50_826
    return _sparse_with(c, indices=raw_array(i))  # at c = 0.01 indices travel as int32


def _duplicated(c: RecordDict) -> RecordDict:
    i = _indices(c).astype(np.int32)
    i[1] = i[0]
    return _sparse_with(c, indices=raw_array(i))


def _float_indices(c: RecordDict) -> RecordDict:
    return _sparse_with(c, indices=raw_array(_indices(c).astype(np.float32)))


def _short(c: RecordDict) -> RecordDict:
    return _sparse_with(c, values=raw_array(_values(c)[:-1]))


def _missing(c: RecordDict) -> RecordDict:
    out = RecordDict(dict(c.items()))
    del out["sparse"]
    return out


CORRUPTIONS = {
    "NaN": _nan,
    "out of range": _out_of_range,
    "duplicated": _duplicated,
    "expected integers": _float_indices,
    "expected": _short,
    "missing": _missing,
}


def _one_round(grid: InProcessGrid, settings) -> tuple[np.ndarray, np.ndarray | None, object]:  # type: ignore[no-untyped-def]
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    strategy = build_strategy(settings, unit_clock({i: PROFILE for i in range(3)}), layout)
    start = layout.unflatten(model_to_vector(model))
    config = ConfigRecord()
    messages = list(strategy.configure_train(1, start, config, grid))  # type: ignore[arg-type]
    arrays, _ = strategy.aggregate_train(1, grid.send_and_receive(messages))
    return layout.flatten(start), None if arrays is None else layout.flatten(arrays), strategy


@pytest.mark.parametrize("reason", list(CORRUPTIONS))
def test_allgather_bad_reply_equals_that_client_dropping_out(reason: str) -> None:
    settings = federation_settings(compression_ratio=0.01, collective="allgather")
    dropped = InProcessGrid(settings)
    dropped.fail_nodes = {101}
    _, expected, _ = _one_round(dropped, settings)
    _, got, strategy = _one_round(CorruptingGrid(settings, {101: CORRUPTIONS[reason]}), settings)
    assert got is not None and expected is not None
    np.testing.assert_array_equal(got, expected)
    stats = last_round(strategy)  # type: ignore[attr-defined]
    assert stats.num_clients == 2
    assert len(stats.refused) == 1 and "node 101" in stats.refused[0] and reason in stats.refused[0]


def test_every_reply_bad_keeps_the_old_model() -> None:
    settings = federation_settings(compression_ratio=0.01, collective="allgather")
    grid = CorruptingGrid(settings, {n: _nan for n in (100, 101, 102)})
    start, got, strategy = _one_round(grid, settings)
    assert got is None  # Strategy.start keeps the previous arrays
    assert last_round(strategy).num_clients == 0  # type: ignore[attr-defined]


def test_allreduce_values_phase_refusal_renormalises() -> None:
    settings = federation_settings(compression_ratio=0.01, collective="allreduce")
    grid = CorruptingGrid(settings, {})
    original = grid.send_and_receive

    def corrupt_values(
        messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        grid.corrupt = {102: _nan} if messages[0].metadata.message_type == "train.values" else {}
        return original(messages, timeout=timeout)

    grid.send_and_receive = corrupt_values  # type: ignore[method-assign]
    _, got, strategy = _one_round(grid, settings)
    assert got is not None
    assert last_round(strategy).num_clients == 2  # type: ignore[attr-defined]
    assert "values" in last_round(strategy).refused[0]  # type: ignore[attr-defined]


def test_allreduce_equals_the_dense_weighted_sum_at_the_shared_indices() -> None:
    settings = federation_settings(compression_ratio=0.05, collective="allreduce")
    grid = InProcessGrid(settings)
    held: dict[int, np.ndarray] = {}
    leader_indices: list[np.ndarray] = []
    original = grid.send_and_receive

    def spy(messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        messages = list(messages)
        if messages[0].metadata.message_type == "train.values":
            for node, context in grid.contexts.items():
                vector = load_vector(context.state, PENDING_KEY)
                assert vector is not None
                held[node] = vector
            leader_indices.append(
                decode_indices(messages[0].content.array_records["index-set"], 50_826)
            )
        return original(messages, timeout=timeout)

    grid.send_and_receive = spy  # type: ignore[method-assign]
    start, got, _ = _one_round(grid, settings)
    assert got is not None
    [shared] = leader_indices
    dense_sum = sum(held[n] for n in sorted(held)) / 3.0  # equal batches: equal weights
    expected = start.copy()
    expected[shared] += dense_sum[shared]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    untouched = np.setdiff1d(np.arange(start.size), shared)
    np.testing.assert_array_equal(got[untouched], start[untouched])
