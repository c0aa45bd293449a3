"""Batch-norm statistics recomputed at given weights.

A model with batch norm is evaluated with its running statistics. In federated training these
are the clients' running averages, taken at their own local weights while they trained, and
averaged: under Top-k the global weights are not any client's, so the statistics may not match
the weights they are evaluated with. Recomputing them at the weights, on data the server holds
(the validation split, carved from the training data), measures that mismatch and removes it.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from common.data import ArrayData
from common.params import model_to_vector, positions_of, vector_to_model


def batch_norms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    """The model's batch-norm layers that keep running statistics."""
    return [
        m
        for m in model.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]


def _counter(layer: nn.modules.batchnorm._BatchNorm) -> torch.Tensor:
    counter = layer.num_batches_tracked
    assert counter is not None  # a layer that tracks running statistics counts its batches
    return counter


def recompute_statistics(
    model: nn.Module, vector: NDArray[np.float32], data: ArrayData
) -> NDArray[np.float32]:
    """``vector`` with every batch-norm layer's running mean and variance replaced by the
    statistics of ``data`` at ``vector``'s weights (one forward pass over all of it in training
    mode); the weights and the batch counters are unchanged."""
    layers = batch_norms(model)
    if not layers:
        return vector
    if len(data) == 0:
        raise ValueError("cannot recompute batch-norm statistics without samples")
    vector_to_model(model, vector)
    counters = [_counter(layer).clone() for layer in layers]
    momenta = [layer.momentum for layer in layers]
    for layer in layers:
        layer.reset_running_stats()
        layer.momentum = None  # a cumulative average: after one pass, that pass's statistics
    model.train()
    try:
        with torch.no_grad():
            model(torch.from_numpy(np.ascontiguousarray(data.x)))
    finally:
        for layer, counter, momentum in zip(layers, counters, momenta, strict=True):
            _counter(layer).copy_(counter)
            layer.momentum = momentum
    return model_to_vector(model)


def statistics_positions(model: nn.Module) -> NDArray[np.int64]:
    """Positions of the batch-norm running means and variances in the model's flat vector (the
    batch counters, buffers too, are not statistics)."""
    names = {
        f"{prefix}.{stat}" if prefix else stat
        for prefix, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        for stat in ("running_mean", "running_var")
    }
    return positions_of(model, names)
