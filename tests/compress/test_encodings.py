"""Every encoding: what the receiver decodes is what the client's error feedback assumed, the
bytes are what ``values_nbytes`` charges, and a malformed payload is refused by name."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
from flwr.app import ArrayRecord

from compress import ENCODINGS
from compress.base import Encoding
from compress.bits import pack, unpack
from compress.qsgd import LEVEL_CODES, NORMS, Qsgd
from compress.sign import SCALE, SIGNS, ScaledSign
from wire.codec import PayloadError, raw_array


@dataclass(frozen=True)
class Options:
    qsgd_levels: int = 7
    qsgd_bucket: int = 64


def _encoding(name: str, **options: int) -> Encoding:
    return ENCODINGS[name].from_settings(Options(**options))


def _values(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("name", list(ENCODINGS))
@pytest.mark.parametrize("count", [0, 1, 7, 8, 9, 1000])
def test_the_receiver_decodes_what_error_feedback_assumed(name: str, count: int) -> None:
    encoding = _encoding(name)
    encoded = encoding.encode(_values(count), np.random.default_rng(1))
    decoded = encoding.decode(ArrayRecord(encoded.arrays), count)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, encoded.decoded)
    assert sum(len(a.data) for a in encoded.arrays.values()) == encoding.values_nbytes(count)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_a_non_finite_value_travels_so_that_the_receiver_refuses_it(name: str) -> None:
    values = _values(10)
    values[3] = np.nan
    encoding = _encoding(name)
    encoded = encoding.encode(values, np.random.default_rng(0))
    with pytest.raises(PayloadError):
        encoding.decode(ArrayRecord(encoded.arrays), 10)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_a_payload_for_another_count_is_refused(name: str) -> None:
    encoding = _encoding(name)
    encoded = encoding.encode(_values(100), np.random.default_rng(0))
    with pytest.raises(PayloadError):
        encoding.decode(ArrayRecord(encoded.arrays), 90)


def test_bytes_per_value() -> None:
    n = 4096
    assert _encoding("float32").values_nbytes(n) == 4 * n
    assert _encoding("int8").values_nbytes(n) == n + 4
    assert _encoding("sign").values_nbytes(n) == n // 8 + 4  # one bit a value and the scale
    # s = 7: 15 levels in 4 bits, a norm a bucket of 64; s = 1: ternary in 2 bits, one norm
    assert _encoding("qsgd").values_nbytes(n) == n // 2 + 4 * (n // 64)
    assert _encoding("qsgd", qsgd_levels=1, qsgd_bucket=0).values_nbytes(n) == n // 4 + 4


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8])
def test_packed_codes_come_back(width: int) -> None:
    codes = np.random.default_rng(width).integers(0, 2**width, size=37)
    packed = pack(codes, width)
    assert packed.size == math.ceil(37 * width / 8)
    np.testing.assert_array_equal(unpack(packed, 37, width, "c"), codes)


def test_bits_past_the_last_code_are_refused() -> None:
    packed = pack(np.ones(5, dtype=np.int64), 1)
    packed[-1] |= 1  # the eighth bit: past the fifth code
    with pytest.raises(PayloadError, match="sets bits past its 5 codes"):
        unpack(packed, 5, 1, "signs")


def test_scaled_sign_sends_the_sign_at_the_mean_magnitude() -> None:
    values = np.array([3.0, -1.0, 0.0, -2.0], dtype=np.float32)
    decoded = ScaledSign().encode(values, np.random.default_rng(0)).decoded
    np.testing.assert_array_equal(decoded, [1.5, -1.5, 1.5, -1.5])  # zero travels as +


def test_scaled_sign_refuses_a_negative_scale() -> None:
    encoded = ScaledSign().encode(_values(16), np.random.default_rng(0))
    bad = dict(encoded.arrays) | {SCALE: raw_array(np.array([-1.0], np.float32))}
    with pytest.raises(PayloadError, match="scale must be"):
        ScaledSign().decode(ArrayRecord(bad), 16)
    without = {k: v for k, v in encoded.arrays.items() if k != SIGNS}
    with pytest.raises(PayloadError, match="'signs' is missing"):
        ScaledSign().decode(ArrayRecord(without), 16)


def test_qsgd_is_unbiased_and_seeded() -> None:
    qsgd = Qsgd(levels=2, bucket=16)
    values = _values(48, seed=3)
    first = qsgd.encode(values, np.random.default_rng(7)).decoded
    np.testing.assert_array_equal(first, qsgd.encode(values, np.random.default_rng(7)).decoded)
    draws = np.array([qsgd.encode(values, np.random.default_rng(s)).decoded for s in range(4000)])
    # each decoded value is one of its bucket's levels, and their mean is the value
    step = np.max(np.abs(draws), axis=0) / 2
    assert np.all(np.abs(draws.mean(axis=0) - values) < 0.1 * step)


def test_qsgd_refuses_codes_above_its_levels_and_wrong_norms() -> None:
    qsgd = Qsgd(levels=2, bucket=4)  # 5 codes in 3 bits: 5, 6 and 7 are not levels
    encoded = qsgd.encode(_values(8), np.random.default_rng(0))
    high = dict(encoded.arrays) | {LEVEL_CODES: raw_array(pack(np.full(8, 7), 3))}
    with pytest.raises(PayloadError, match="a level code above 4"):
        qsgd.decode(ArrayRecord(high), 8)
    one_norm = dict(encoded.arrays) | {NORMS: raw_array(np.ones(1, np.float32))}
    with pytest.raises(PayloadError, match="1 norms, expected 2"):
        qsgd.decode(ArrayRecord(one_norm), 8)
    negative = dict(encoded.arrays) | {NORMS: raw_array(-np.ones(2, np.float32))}
    with pytest.raises(PayloadError, match="norms must be finite"):
        qsgd.decode(ArrayRecord(negative), 8)
