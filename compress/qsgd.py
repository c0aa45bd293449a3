"""QSGD (Alistarh et al., "QSGD: communication-efficient SGD via gradient quantization and
encoding", NeurIPS 2017): each value travels as one of 2s + 1 levels of its bucket's norm,
ℓ / s x ||v_bucket||_2 with ℓ in -s..s, rounded stochastically so that the decoded value is
unbiased: |v_i| / ||v_bucket|| x s = l + p rounds up to l + 1 with probability p.

The values are cut into buckets of ``qsgd-bucket`` (the paper's experiments use 512; 0: one
bucket), each with its own norm: the variance grows with a bucket's length (at most
min(n / s², √n / s) x ||v||²). Levels travel packed in ``ceil(log2(2s + 1))`` bits each
(s = ``qsgd-levels``; s = 1 is ternary, 2 bits) and each bucket's norm as a float32. QSGD's
Elias coding of runs of zeros is not used: the byte count is the fixed width, as sent.
"""

from __future__ import annotations

import math
from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from compress.base import Encoded, EncodingOptions, Vector
from compress.bits import pack, packed_nbytes, unpack
from wire.codec import PayloadError, raw_array, read_raw

# This encoding's arrays
LEVEL_CODES = "levels"  # ℓ + s per value, packed
NORMS = "norms"  # float32, one per bucket: its ||v||_2


class Qsgd:
    name: ClassVar[str] = "qsgd"
    keeps_energy: ClassVar[bool] = False  # unbiased values, not an unbiased energy

    def __init__(self, levels: int, bucket: int = 0) -> None:
        if levels < 1 or bucket < 0:
            raise ValueError(f"QSGD needs levels >= 1 and bucket >= 0, got {levels}, {bucket}")
        self.levels, self.bucket = levels, bucket
        self.width = math.ceil(math.log2(2 * levels + 1))

    @classmethod
    def from_settings(cls, options: EncodingOptions) -> Self:
        return cls(options.qsgd_levels, options.qsgd_bucket)

    def buckets(self, count: int) -> int:
        return math.ceil(count / self.bucket) if self.bucket else min(count, 1)

    def _bucket_of(self, count: int) -> NDArray[np.int64]:
        positions = np.arange(count, dtype=np.int64)
        return positions // self.bucket if self.bucket else np.zeros(count, dtype=np.int64)

    def _decoded(self, codes: NDArray[np.int64], norms: NDArray[np.float32]) -> Vector:
        steps = (codes - self.levels).astype(np.float32) / np.float32(self.levels)
        return (steps * norms[self._bucket_of(codes.size)]).astype(np.float32)

    def encode(self, values: Vector, rng: np.random.Generator) -> Encoded:
        values = values.astype(np.float32, copy=False)
        bucket = self._bucket_of(values.size)
        squares = np.bincount(bucket, weights=values.astype(np.float64) ** 2)
        norms = np.sqrt(squares).astype(np.float32)  # NaN for a NaN: the receiver refuses it
        if not np.all(np.isfinite(values)):
            codes = np.full(values.size, self.levels, dtype=np.int64)
        else:
            of_value = norms[bucket].astype(np.float64)
            scaled = np.abs(values) / np.where(of_value > 0, of_value, 1.0) * self.levels
            floor = np.floor(scaled)
            up = rng.random(values.size) < (scaled - floor)  # P(up) = the fraction: unbiased
            magnitude = np.minimum(floor + up, self.levels).astype(np.int64)
            codes = np.where(values < 0, -magnitude, magnitude) + self.levels
        arrays = {
            LEVEL_CODES: raw_array(pack(codes, self.width)),
            NORMS: raw_array(norms.astype("<f4")),
        }
        return Encoded(arrays, self._decoded(codes, norms))

    def decode(self, record: ArrayRecord, count: int) -> Vector:
        codes = unpack(read_raw(record, LEVEL_CODES, "uint8"), count, self.width, LEVEL_CODES)
        if codes.size and codes.max() > 2 * self.levels:
            raise PayloadError(f"a level code above {2 * self.levels} (qsgd-levels {self.levels})")
        norms = read_raw(record, NORMS, "float32").astype(np.float32)
        if norms.size != self.buckets(count):
            raise PayloadError(f"{norms.size} norms, expected {self.buckets(count)}")
        if not np.all(np.isfinite(norms)) or np.any(norms < 0):
            raise PayloadError("norms must be finite numbers >= 0")
        with np.errstate(over="ignore"):  # a huge norm overflows: refused just below
            values = self._decoded(codes, norms)
        if not np.all(np.isfinite(values)):
            raise PayloadError("values contain NaN or infinite entries")
        return values

    def values_nbytes(self, count: int) -> int:
        return packed_nbytes(count, self.width) + 4 * self.buckets(count)
