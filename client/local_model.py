"""The model a client process trains, built once per (model, data shape, seed, device) and
reused by every message: building it and moving it cost a sixth of a dense client's training
message (profiled, benchmarks/profile_round.py). What an earlier message left in it is never
read: local training first loads the whole state, parameters and buffers, from the round's
start vector (``common.params.vector_to_model``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray
from torch import nn

from common.accelerator import resolve
from common.data import DataSpec
from common.models import build_model
from common.params import buffer_positions, model_to_vector, vector_to_model
from wire.layout import Layout


@dataclass(frozen=True)
class LocalModel:
    module: nn.Module  # on its device; its weights are whatever the last message trained
    layout: Layout  # names and shapes of its state, in order
    buffers: NDArray[np.int64]  # positions of its buffers in the flat vector


@lru_cache(maxsize=4)  # a process serves one run at a time; a few in tests
def local_model(name: str, spec: DataSpec, seed: int, device: str) -> LocalModel:
    """Model ``name`` for samples of ``spec`` on ``device`` (``auto``, ``cpu``, ...), weights
    from ``seed`` when first built."""
    module = build_model(name, spec, seed=seed)
    module.to(resolve(device))
    _check_loads_in_place(name, module)
    buffers = buffer_positions(module)
    buffers.setflags(write=False)  # shared by every message of the process
    return LocalModel(module, Layout.of_model(module), buffers)


def _check_loads_in_place(name: str, module: nn.Module) -> None:
    """ValueError unless a vector loaded into ``module`` reads back: its ``state_dict()`` must
    hand out the module's own tensors (a factory's module whose state dict holds copies would
    keep one message's weights into the next)."""
    before = model_to_vector(module)
    probe = before + np.float32(1.0)
    vector_to_model(module, probe)
    if not np.array_equal(model_to_vector(module), probe):
        raise ValueError(
            f"model = {name!r}: its state_dict() does not hold the module's own tensors, so "
            "weights cannot be loaded into it in place"
        )
    vector_to_model(module, before)
