"""int8 values: the selected values travel as int8 with one float32 scale per message, a
quarter of float32's bytes.

scale = max |v| / 127; q = v / scale rounded stochastically (up with probability equal to the
fraction, from a generator seeded per client, round and phase, so the rounding is unbiased and
a run repeats); the receiver decodes q x scale. Error feedback keeps v − q x scale with the
entries left out, so the quantisation error is sent in later rounds.
"""

from __future__ import annotations

from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from compress.base import Encoded, EncodingOptions
from wire.codec import PayloadError, raw_array, read_raw

# This encoding's arrays (its format; both halves read them from here)
QUANTISED = "quantised"  # int8 values
SCALE = "scale"  # float32, one per message: value = quantised x scale
LEVELS = 127  # int8 values in [-127, 127]: symmetric around 0


def _dequantise(quantised: NDArray[np.int8], scale: np.float32) -> NDArray[np.float32]:
    return quantised.astype(np.float32) * scale


class Int8:
    name: ClassVar[str] = "int8"
    keeps_energy: ClassVar[bool] = True  # stochastic rounding to 1/127 of the largest value

    @classmethod
    def from_settings(cls, options: EncodingOptions) -> Self:
        return cls()

    def encode(self, values: NDArray[np.float32], rng: np.random.Generator) -> Encoded:
        values = values.astype(np.float32, copy=False)
        if not np.all(np.isfinite(values)):  # a NaN scale: the receiver refuses the message
            nan = np.float32(np.nan)
            arrays = {
                QUANTISED: raw_array(np.zeros(values.size, np.int8)),
                SCALE: raw_array(np.array([nan], dtype="<f4")),
            }
            return Encoded(arrays, np.full(values.size, nan, dtype=np.float32))
        largest = np.float32(np.abs(values).max()) if values.size else np.float32(0.0)
        scale = largest / np.float32(LEVELS) if largest > 0 else np.float32(1.0)
        scaled = values / scale
        floor = np.floor(scaled)
        up = rng.random(values.size) < (scaled - floor)  # P(up) = the fraction: unbiased
        quantised = np.clip(floor + up, -LEVELS, LEVELS).astype(np.int8)
        arrays = {
            QUANTISED: raw_array(quantised),
            SCALE: raw_array(np.array([scale], dtype="<f4")),
        }
        return Encoded(arrays, _dequantise(quantised, scale))

    def decode(self, record: ArrayRecord, count: int) -> NDArray[np.float32]:
        quantised = read_raw(record, QUANTISED, "int8")
        if quantised.size != count:
            raise PayloadError(f"{quantised.size} quantised values, expected {count}")
        scale = read_raw(record, SCALE, "float32")
        if scale.size != 1 or not np.isfinite(scale[0]) or scale[0] <= 0:
            raise PayloadError(f"scale must be one finite number > 0, got {scale.tolist()[:4]}")
        with np.errstate(over="ignore"):  # a huge scale overflows: refused just below
            values = _dequantise(quantised.astype(np.int8, copy=False), np.float32(scale[0]))
        if not np.all(np.isfinite(values)):
            raise PayloadError("values contain NaN or infinite entries")
        return values

    def values_nbytes(self, count: int) -> int:
        return count + 4  # int8 values and the scale
