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
from common.params import buffer_positions
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
    buffers = buffer_positions(module)
    buffers.setflags(write=False)  # shared by every message of the process
    return LocalModel(module, Layout.of_model(module), buffers)
