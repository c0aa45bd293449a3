"""Conversions between a torch model and one flat float32 vector (``wire.layout.Layout``
does the same for Flower ArrayRecords)."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn


def model_to_vector(model: nn.Module) -> NDArray[np.float32]:
    # .cpu(): a model trained on a GPU comes back (on the CPU it is the tensor itself)
    flat = torch.cat([t.detach().reshape(-1).float() for t in model.state_dict().values()])
    return flat.cpu().numpy()


def positions_of(model: nn.Module, names: set[str]) -> NDArray[np.int64]:
    """Positions in the model's flat vector of the ``state_dict`` entries named."""
    positions, offset = [], 0
    for name, tensor in model.state_dict().items():
        if name in names:
            positions.append(np.arange(offset, offset + tensor.numel(), dtype=np.int64))
        offset += tensor.numel()
    return np.concatenate(positions) if positions else np.zeros(0, dtype=np.int64)


def buffer_positions(model: nn.Module) -> NDArray[np.int64]:
    """Positions of the model's buffers (batch-norm statistics, counters) in its flat vector."""
    return positions_of(model, {name for name, _ in model.named_buffers()})


def vector_to_model(model: nn.Module, vector: NDArray[np.float32]) -> None:
    """Every ``state_dict`` entry, parameters and buffers, copied in place from ``vector``
    (cast to the entry's dtype, on its device), as ``load_state_dict`` would load them."""
    tensors = list(model.state_dict().values())
    size = sum(tensor.numel() for tensor in tensors)
    if size != vector.size:
        raise ValueError(f"vector has {vector.size} values, the model {size}")
    source = torch.from_numpy(np.ascontiguousarray(vector, dtype=np.float32))
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            n = tensor.numel()
            tensor.copy_(source[offset : offset + n].view(tensor.shape))
            offset += n
