"""Local SGD on a client's data; returns the model update (new − old) as one flat vector."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from common.data import ArrayData
from common.params import model_to_vector, vector_to_model


@dataclass(frozen=True)
class TrainResult:
    update: NDArray[np.float32]  # new parameters − received parameters
    num_examples: int  # samples trained on this round (all steps)
    train_loss: float  # mean loss over the steps, before each step


def batch_rng(seed: int, partition_id: int, server_round: int) -> np.random.Generator:
    """A private generator per (seed, client, round): batches do not depend on process history."""
    return np.random.default_rng([seed, partition_id, server_round])


def local_sgd(
    model: nn.Module,
    start: NDArray[np.float32],
    data: ArrayData,
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    rng: np.random.Generator,
) -> TrainResult:
    """``steps`` plain SGD steps on batches drawn without replacement from ``data``."""
    if len(data) == 0:
        raise ValueError("cannot train on an empty partition")
    vector_to_model(model, start)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    size = min(batch_size, len(data))
    losses: list[float] = []
    for _ in range(steps):
        idx = rng.choice(len(data), size=size, replace=False)
        x = torch.from_numpy(data.x[idx])
        y = torch.from_numpy(data.y[idx])
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    update = model_to_vector(model) - start
    return TrainResult(
        update=update.astype(np.float32),
        num_examples=size * steps,
        train_loss=float(np.mean(losses)),
    )
