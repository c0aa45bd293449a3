"""Conversions between a torch model, Flower ArrayRecords and one flat float32 vector.

Compression and aggregation work on the whole model flattened into one vector; the layout
(names, shapes, order) is the model's ``state_dict`` order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord
from numpy.typing import NDArray
from torch import nn


@dataclass(frozen=True)
class Layout:
    """Names and shapes of a model's arrays, in order."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.shapes))

    @classmethod
    def of_model(cls, model: nn.Module) -> Layout:
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
            arr = record[name].numpy()
            # Flower stores a 0-d array (batch norm's num_batches_tracked) with shape (1,).
            if tuple(arr.shape) != shape and not (shape == () and arr.shape == (1,)):
                raise ValueError(f"array {name!r} has shape {arr.shape}, expected {shape}")
            parts.append(arr.astype(np.float32, copy=False).reshape(-1))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def unflatten(self, vector: NDArray[np.float32]) -> ArrayRecord:
        if vector.shape != (self.size,):
            raise ValueError(f"vector has shape {vector.shape}, expected ({self.size},)")
        arrays: dict[str, Array] = {}
        offset = 0
        for name, shape in zip(self.names, self.shapes, strict=True):
            n = int(np.prod(shape))
            arrays[name] = Array(np.ascontiguousarray(vector[offset : offset + n].reshape(shape)))
            offset += n
        return ArrayRecord(arrays)


def model_to_vector(model: nn.Module) -> NDArray[np.float32]:
    return torch.cat([t.detach().reshape(-1).float() for t in model.state_dict().values()]).numpy()


def vector_to_model(model: nn.Module, vector: NDArray[np.float32]) -> None:
    offset = 0
    state = model.state_dict()
    new_state = {}
    for name, tensor in state.items():
        n = tensor.numel()
        new_state[name] = torch.from_numpy(
            np.array(vector[offset : offset + n], dtype=np.float32).reshape(tensor.shape)
        )
        offset += n
    if offset != vector.size:
        raise ValueError(f"vector has {vector.size} values, the model {offset}")
    model.load_state_dict(new_state)
