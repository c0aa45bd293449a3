"""Codes of a few bits each, packed end to end into bytes (most significant bit first).

Encodings that send less than a byte a value (a sign, a QSGD level) travel as they are
counted: ``count`` codes of ``width`` bits take ``ceil(count x width / 8)`` bytes.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from wire.codec import PayloadError


def packed_nbytes(count: int, width: int) -> int:
    return math.ceil(count * width / 8)


def _shifts(width: int) -> NDArray[np.int64]:
    return np.arange(width - 1, -1, -1, dtype=np.int64)


def pack(codes: NDArray[np.integer], width: int) -> NDArray[np.uint8]:
    """``codes`` (each below 2**width) as ``packed_nbytes(codes.size, width)`` bytes."""
    bits = (codes.astype(np.int64)[:, None] >> _shifts(width)) & 1
    return np.packbits(bits.astype(np.uint8).ravel())


def unpack(packed: NDArray[np.generic], count: int, width: int, name: str) -> NDArray[np.int64]:
    """``count`` codes of ``width`` bits from ``packed`` (the array ``name``), checked: exactly
    the bytes they take, and no bit set past the last code."""
    expected = packed_nbytes(count, width)
    if packed.size != expected:
        raise PayloadError(f"array {name!r} has {packed.size} bytes, expected {expected}")
    bits = np.unpackbits(packed.astype(np.uint8, copy=False))
    if bits[count * width :].any():
        raise PayloadError(f"array {name!r} sets bits past its {count} codes")
    return bits[: count * width].reshape(count, width).astype(np.int64) @ (1 << _shifts(width))
