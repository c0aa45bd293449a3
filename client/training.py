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


def random_batches(
    rng: np.random.Generator, size: int, batch_size: int, steps: int
) -> list[NDArray[np.int64]]:
    """``steps`` batches of min(batch_size, size) ids, each drawn without replacement."""
    if size == 0:
        raise ValueError("cannot train on an empty partition")
    count = min(batch_size, size)
    return [rng.choice(size, size=count, replace=False).astype(np.int64) for _ in range(steps)]


def _sgd_step(parameters: list[nn.Parameter], learning_rate: float) -> None:
    """p -= lr * grad, as torch.optim.SGD without momentum or weight decay computes it on the
    CPU (``param.add_(grad, alpha=-lr)``), the same bits (golden records). Not SGD itself: an
    optimizer's first step imports torch._dynamo (``torch._disable_dynamo``), 1.5 s of every
    client process's first round on 2 cores."""
    with torch.no_grad():
        for p in parameters:
            if p.grad is not None:
                p.add_(p.grad, alpha=-learning_rate)


def local_sgd(
    model: nn.Module,
    start: NDArray[np.float32],
    data: ArrayData,
    *,
    batches: list[NDArray[np.int64]],
    learning_rate: float,
    extra: ArrayData | None = None,
) -> TrainResult:
    """One plain SGD step per batch of sample ids into ``data``; ``extra`` samples (relayed
    by data injection) join every batch of the round, so each local step sees them. It trains
    where the model is (common/accelerator.py); the update comes back as numpy."""
    if not batches or any(b.size == 0 for b in batches):
        raise ValueError("cannot train without samples: every step needs a non-empty batch")
    vector_to_model(model, start)
    device = next(model.parameters()).device
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    loss_fn = nn.CrossEntropyLoss()
    losses: list[torch.Tensor] = []
    for idx in batches:
        xs, ys = data.x[idx], data.y[idx]
        if extra is not None and len(extra) > 0:
            xs, ys = np.concatenate([xs, extra.x]), np.concatenate([ys, extra.y])
        x = torch.from_numpy(np.ascontiguousarray(xs)).to(device)
        y = torch.from_numpy(np.ascontiguousarray(ys)).to(device)
        for p in parameters:
            p.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        _sgd_step(parameters, learning_rate)
        losses.append(loss.detach())  # read once after the loop: a GPU does not wait each step
    for p in parameters:  # the model is kept for the next message: no gradients kept with it
        p.grad = None
    update = model_to_vector(model) - start
    return TrainResult(
        update=update.astype(np.float32),
        num_examples=int(sum(b.size for b in batches))
        + (0 if extra is None else len(extra) * len(batches)),
        # float64 before the mean, as Python floats were (MPS has no float64: on the CPU)
        train_loss=float(np.mean(torch.stack(losses).cpu().double().numpy())),
    )
