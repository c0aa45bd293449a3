"""A model's layout: the names and shapes of its arrays, in ``state_dict`` order.

Compression and aggregation work on the whole model flattened into one float32 vector; the
dense collective's messages carry it in this layout, one Array per tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray

from wire.codec import load_numpy, numpy_array
from wire.keys import ARRAYS_KEY


class HasStateDict(Protocol):
    """A torch module, as far as its layout goes (wire/ does not import torch)."""

    def state_dict(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Layout:
    """Names and shapes of a model's arrays, in order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.shapes))

    def vector_positions(self) -> NDArray[np.int64]:
        """Positions of the arrays of at most one dimension (biases, norm scales and shifts,
        batch-norm statistics and counters) in the flat vector."""
        positions, offset = [], 0
        for shape in self.shapes:
            n = int(np.prod(shape))
            if len(shape) <= 1:
                positions.append(np.arange(offset, offset + n, dtype=np.int64))
            offset += n
        return np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)

    @classmethod
    def of_model(cls, model: HasStateDict) -> Layout:
        state = model.state_dict()
        return cls(tuple(state), tuple(tuple(t.shape) for t in state.values()))

    @classmethod
    def of_record(cls, record: ArrayRecord) -> Layout:
        return cls(tuple(record), tuple(tuple(a.shape) for a in record.values()))

    def flatten(self, record: ArrayRecord) -> NDArray[np.float32]:
        """All arrays of ``record`` concatenated into one float32 vector."""
        if tuple(record) != self.names:
            raise ValueError(f"array names {list(record)} do not match the model's {self.names}")
        parts = []
        for name, shape in zip(self.names, self.shapes, strict=True):
            # A 0-d array (batch norm's num_batches_tracked) may travel with shape (1,).
            shapes = (shape, (1,)) if shape == () else (shape,)
            arr = load_numpy(record[name], name, "float32", shapes)
            parts.append(arr.astype(np.float32, copy=False).reshape(-1))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def update_of(self, record: ArrayRecord | None) -> NDArray[np.float32]:
        """A client's dense update in this layout, checked: every array, float32, finite."""
        if record is None:
            raise ValueError(f"missing ArrayRecord {ARRAYS_KEY!r}")
        for name, array in record.items():
            if array.dtype != "float32":
                raise ValueError(f"array {name!r} has dtype {array.dtype}, expected float32")
        update = self.flatten(record)
        if not np.all(np.isfinite(update)):
            raise ValueError("update contains NaN or infinite values")
        return update

    def unflatten(self, vector: NDArray[np.float32]) -> ArrayRecord:
        if vector.shape != (self.size,):
            raise ValueError(f"vector has shape {vector.shape}, expected ({self.size},)")
        arrays: dict[str, Array] = {}
        offset = 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            n = int(np.prod(shape))
            arrays[name] = numpy_array(vector[offset : offset + n].reshape(shape))
            offset += n
        return ArrayRecord(arrays)
