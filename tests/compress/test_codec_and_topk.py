import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

from compress.topk import topk_indices
from wire.codec import (
    INDICES,
    MASK,
    PayloadError,
    Sparse,
    encode_indices,
    index_nbytes,
    numpy_array,
    raw_array,
    topk_count,
)


def _reference(x: np.ndarray, k: int) -> np.ndarray:
    return np.sort(np.argsort(-np.abs(x), kind="stable")[:k])


@pytest.mark.parametrize("n", [10, 1000, 300_000])
@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.1, 0.5, 1.0])
def test_selection_keeps_exactly_the_k_largest(n: int, ratio: float) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    k = topk_count(n, ratio)
    chosen = topk_indices(x, k)
    assert chosen.size == k and np.all(np.diff(chosen) > 0)
    np.testing.assert_array_equal(chosen, _reference(x, k))


def test_selection_on_adversarial_layouts_still_exact() -> None:
    n = 200_000
    sorted_x = np.linspace(-1, 1, n, dtype=np.float32)  # the strided sample sees a ramp
    spikes = np.zeros(n, dtype=np.float32)
    spikes[np.arange(7, n, 9973)] = 5.0  # the sample misses the few large entries
    for x, k in ((sorted_x, 2000), (spikes, 15)):
        chosen = topk_indices(x, k)
        assert chosen.size == k
        assert np.abs(x[chosen]).min() >= np.sort(np.abs(x))[-k]


def test_ties_give_exactly_k() -> None:
    x = np.ones(100_000, dtype=np.float32)
    assert topk_indices(x, 1000).size == 1000


def test_index_encoding_takes_the_smaller_one() -> None:
    d = 50_826
    few = np.arange(0, 100, dtype=np.int64)
    many = np.arange(0, d, 4, dtype=np.int64)
    assert encode_indices(few, d)[0] == INDICES
    assert encode_indices(many, d)[0] == MASK
    assert index_nbytes(few.size, d) == 400 and index_nbytes(many.size, d) == 6354
    for indices in (few, many):
        sparse = Sparse(indices, np.arange(indices.size, dtype=np.float32), d)
        back = Sparse.from_record(sparse.to_record(), d, indices.size)
        np.testing.assert_array_equal(back.indices, indices)
        np.testing.assert_array_equal(back.values, sparse.values)


def _payload(indices: np.ndarray, values: np.ndarray) -> ArrayRecord:
    return ArrayRecord({"values": raw_array(values), "indices": raw_array(indices)})


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (_payload(np.array([1, 2, 100], np.int32), np.ones(3, np.float32)), "out of range"),
        (_payload(np.array([-1, 2, 3], np.int32), np.ones(3, np.float32)), "out of range"),
        (_payload(np.array([1, 2, 2], np.int32), np.ones(3, np.float32)), "duplicated"),
        (
            _payload(np.array([1.0, 2.0, 3.0], np.float32), np.ones(3, np.float32)),
            "expected integers",
        ),
        (_payload(np.array([1, 2, 3], np.int32), np.ones(2, np.float32)), "2 values, expected 3"),
        (_payload(np.array([1, 2], np.int32), np.ones(2, np.float32)), "2 indices, expected 3"),
        (_payload(np.array([1, 2, 3], np.int32), np.array([1, np.nan, 2], np.float32)), "NaN"),
        (
            _payload(np.array([1, 2, 3], np.int32), np.array([1, np.inf, 2], np.float32)),
            "NaN or infinite",
        ),
        (_payload(np.array([1, 2, 3], np.int32), np.ones(3, np.float64)), "dtype float64"),
        (
            ArrayRecord({"values": raw_array(np.ones(3, np.float32))}),
            "neither 'indices' nor 'mask'",
        ),
        (ArrayRecord({"indices": raw_array(np.array([1, 2, 3], np.int32))}), "'values' is missing"),
        (
            ArrayRecord(
                {
                    "values": raw_array(np.ones(3, np.float32)),
                    "mask": raw_array(np.full(13, 255, np.uint8)),
                }
            ),
            "beyond the vector",
        ),
        (
            ArrayRecord(
                {
                    "values": Array(
                        dtype="float32", shape=(3,), stype="edgeflex.raw", data=b"\0" * 5
                    ),
                    "indices": raw_array(np.array([1, 2, 3], np.int32)),
                }
            ),
            "carries 5 bytes",
        ),
    ],
)
def test_malformed_payloads_are_refused_with_the_reason(record: ArrayRecord, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        Sparse.from_record(record, size=100, count=3)


@pytest.mark.parametrize(
    "values",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.ones((), dtype=np.float32),
        np.zeros(0, dtype=np.float32),
        np.arange(5, dtype=np.int64),
        np.ones((2, 3, 4))[:, ::2],
    ],
)
def test_numpy_array_is_what_flower_writes(values: np.ndarray) -> None:
    mine, flowers = numpy_array(values), Array(np.ascontiguousarray(values))
    assert (mine.dtype, mine.shape, mine.stype) == (flowers.dtype, flowers.shape, flowers.stype)
    assert mine.data == flowers.data
