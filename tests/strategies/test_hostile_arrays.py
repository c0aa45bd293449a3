"""Arrays a hostile client could send: each costs that reply, never the run or the memory."""

from io import BytesIO

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, RecordDict

from strategies.relay import InjectionPlan
from tests.helpers import (
    TINY_SHAPES,
    last_round,
    reply_message,
    start_round,
    tiny_record,
    tiny_strategy,
    train_reply,
)
from wire.codec import PayloadError, load_numpy, read_npy

pytestmark = pytest.mark.usefixtures("task_identity")
TERA = 10**12


def _npy(header_shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"\0" * 48) -> bytes:
    stream = BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": header_shape}
    np.lib.format.write_array_header_1_0(stream, header)
    return stream.getvalue() + data


def _array(shape: tuple[int, ...], data: bytes, stype: str = "numpy.ndarray") -> Array:
    return Array(dtype="float32", shape=shape, stype=stype, data=data)


HOSTILE = {
    "a header claiming 10**12 elements": _array((4, 3), _npy((TERA,))),
    "metadata and header claiming 10**12": _array((TERA,), _npy((TERA,))),
    "a foreign stype": _array((4, 3), b"\x80\x04N.", stype="pickle"),
    "no .npy header": _array((4, 3), b"\0" * 48),
    "float64 data labelled float32": _array((4, 3), _npy((4, 3), "<f8", b"\0" * 96)),
    "missing data": _array((4, 3), _npy((4, 3), data=b"\0" * 8)),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_dense_update_is_refused_and_the_round_goes_on(case: str) -> None:
    rng = np.random.default_rng(0)
    global_arrays, good = tiny_record(rng), tiny_record(rng, 0.1)
    hostile = ArrayRecord({"w": HOSTILE[case], "b": good["b"]})
    strategy = tiny_strategy(2)
    start_round(strategy, global_arrays, 2)
    arrays, _ = strategy.aggregate_train(
        1,
        [
            reply_message(train_reply(0, 5, update=good), 100),
            reply_message(train_reply(1, 5, update=hostile), 101),
        ],
    )
    assert arrays is not None
    for k in TINY_SHAPES:  # only the good client counts
        expected = global_arrays[k].numpy() + good[k].numpy()
        np.testing.assert_allclose(arrays[k].numpy(), expected, atol=1e-7)
    [refused] = last_round(strategy).refused
    assert refused.startswith("node 101: ")


def test_load_numpy_reads_honest_arrays_and_allocates_nothing_for_lies() -> None:
    honest = Array(np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(load_numpy(honest, "w", "float32", ((4, 3),)), honest.numpy())
    for array in HOSTILE.values():
        with pytest.raises(PayloadError):
            load_numpy(array, "w", "float32", ((4, 3),))


def test_hostile_injected_samples_are_refused_before_loading() -> None:
    plan = InjectionPlan(0.5, 0.5, seed=0, num_features=64, num_classes=10)
    x = Array(dtype="float32", shape=(TERA, 64), stype="numpy.ndarray", data=_npy((TERA, 64)))
    y = Array(dtype="int64", shape=(TERA,), stype="numpy.ndarray", data=_npy((TERA,), "<i8"))
    with pytest.raises(ValueError, match="data bytes"):
        plan.check(ArrayRecord({"x": x, "y": y}), batch=8)


def test_refusals_quote_a_client_briefly() -> None:
    rng = np.random.default_rng(1)
    strategy = tiny_strategy(2)
    start_round(strategy, tiny_record(rng), 2)
    content = train_reply(0, 5, update=tiny_record(rng, 0.1))
    chatty = RecordDict(dict(content.items()))
    chatty.metric_records["metrics"]["train-loss"] = [0.5] * 200_000
    strategy.aggregate_train(1, [reply_message(chatty, 100), reply_message(chatty, 101)])
    assert all(len(r) < 400 for r in last_round(strategy).refused)
    assert len(last_round(strategy).refused) == 2


def test_headers_read_once_still_refuse_every_lie() -> None:
    """read_npy keeps NumPy's reading of each header it saw: the same header with other data,
    a header cut short, an unknown version or Python objects are refused every time."""
    honest = _npy((4, 3))
    truncated = honest[:20]
    version_3 = honest[:6] + b"\x03\x00" + honest[8:]
    objects = _npy((2,), "|O", b"\0" * 16)
    cases = {
        "carries 8 data bytes, expected 48": honest[:-40],
        "no readable .npy header": truncated,
        "no readable .npy header ": version_3,
        "holds Python objects": objects,
    }
    for _ in range(2):  # the second time from what was kept
        assert read_npy(honest, "w").shape == (4, 3)
        for message, data in cases.items():
            with pytest.raises(PayloadError, match=message.strip()):
                read_npy(data, "w")
