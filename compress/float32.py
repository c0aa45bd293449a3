"""float32 values: the receiver decodes exactly what was sent."""

from __future__ import annotations

from typing import ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord

from compress.base import Encoded, EncodingOptions, Vector
from wire.codec import decode_values, raw_array
from wire.keys import VALUES


class Float32:
    name: ClassVar[str] = "float32"
    keeps_energy: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, options: EncodingOptions) -> Self:
        return cls()

    def encode(self, values: Vector, rng: np.random.Generator) -> Encoded:
        values = values.astype(np.float32, copy=False)
        return Encoded({VALUES: raw_array(values.astype("<f4"))}, values)

    def decode(self, record: ArrayRecord, count: int) -> Vector:
        return decode_values(record, count)

    def values_nbytes(self, count: int) -> int:
        return 4 * count
