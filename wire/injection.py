"""Data injection's raw samples (``Samples``): what a sharer's training reply carries and the
relay attaches to the next round's instructions, checked before anything is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from numpy.typing import NDArray

from wire.codec import load_numpy, short
from wire.keys import INJECT_KEY, SAMPLES_X, SAMPLES_Y


@dataclass(frozen=True)
class Samples:
    """Raw samples (data injection): features and labels."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]

    def to_record(self) -> ArrayRecord:
        return ArrayRecord(
            {
                SAMPLES_X: Array(np.ascontiguousarray(self.x)),
                SAMPLES_Y: Array(np.ascontiguousarray(self.y)),
            }
        )

    @classmethod
    def parse(cls, record: ArrayRecord) -> Samples:
        """Checked before loading: two arrays, x float32 (n, features) and y int64 (n,)."""
        if set(record) != {SAMPLES_X, SAMPLES_Y}:
            raise ValueError(
                f"{INJECT_KEY} must hold arrays 'x' and 'y', got {short(sorted(record))}"
            )
        x, y = record[SAMPLES_X], record[SAMPLES_Y]
        if x.dtype != "float32" or y.dtype != "int64":
            raise ValueError(f"{INJECT_KEY}: x must be float32 and y int64")
        if len(x.shape) != 2 or tuple(y.shape) != (x.shape[0],):
            raise ValueError(
                f"{INJECT_KEY}: expected x of shape (n, features) and y of shape (n,), got "
                f"{short(tuple(x.shape))} and {short(tuple(y.shape))}"
            )
        return cls(
            load_numpy(x, SAMPLES_X, "float32"),  # type: ignore[arg-type]
            load_numpy(y, SAMPLES_Y, "int64"),  # type: ignore[arg-type]
        )


def samples_of(content: RecordDict) -> Samples | None:
    """The injected samples a message carries, if any."""
    if INJECT_KEY not in content.array_records:
        return None
    return Samples.parse(content.array_records[INJECT_KEY])


def with_samples(content: RecordDict, record: ArrayRecord) -> RecordDict:
    """A copy of ``content`` (messages may share one) that also carries injected samples."""
    out = RecordDict(dict(content))
    out[INJECT_KEY] = record
    return out
