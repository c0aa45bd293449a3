"""Scaled sign (EF-signSGD; Karimireddy et al., "Error feedback fixes SignSGD and other gradient
compression schemes", ICML 2019): each value travels as its sign, one bit, and the message
carries one scale, the mean magnitude ||v||_1 / n; the receiver decodes sign x scale.

Biased on its own, and the scale keeps only the values' mean size: error feedback sends the
rest later. A zero value travels as +scale (one bit has no zero).
"""

from __future__ import annotations

from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from compress.base import Encoded, EncodingOptions, Vector
from compress.bits import pack, packed_nbytes, unpack
from wire.codec import PayloadError, raw_array, read_raw

# This encoding's arrays
SIGNS = "signs"  # one bit a value, 1 for >= 0, packed
SCALE = "scale"  # float32, one per message: value = ±scale


def _decoded(positive: NDArray[np.bool_], scale: np.float32) -> Vector:
    return np.where(positive, scale, -scale).astype(np.float32)


class ScaledSign:
    name: ClassVar[str] = "sign"
    keeps_energy: ClassVar[bool] = False  # (||v||_1)² / n of ||v||²: at most, often far less

    @classmethod
    def from_settings(cls, options: EncodingOptions) -> Self:
        return cls()

    def encode(self, values: Vector, rng: np.random.Generator) -> Encoded:
        values = values.astype(np.float32, copy=False)
        positive = values >= 0
        if values.size and np.all(np.isfinite(values)):
            scale = np.float32(np.abs(values.astype(np.float64)).mean())
        else:  # nothing, or a NaN: a NaN scale, which the receiver refuses
            scale = np.float32(0.0 if not values.size else np.nan)
        arrays = {
            SIGNS: raw_array(pack(positive.astype(np.uint8), 1)),
            SCALE: raw_array(np.array([scale], dtype="<f4")),
        }
        return Encoded(arrays, _decoded(positive, scale))

    def decode(self, record: ArrayRecord, count: int) -> Vector:
        positive = unpack(read_raw(record, SIGNS, "uint8"), count, 1, SIGNS).astype(bool)
        scale = read_raw(record, SCALE, "float32")
        if scale.size != 1 or not np.isfinite(scale[0]) or scale[0] < 0:
            raise PayloadError(f"scale must be one finite number >= 0, got {scale.tolist()[:4]}")
        return _decoded(positive, np.float32(scale[0]))

    def values_nbytes(self, count: int) -> int:
        return packed_nbytes(count, 1) + 4
