"""Centralized evaluation of the global model on the server's held-out test split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from common.data import ArrayData
from common.params import vector_to_model


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    loss: float


def evaluate(model: nn.Module, parameters: NDArray[np.float32], test: ArrayData) -> Evaluation:
    vector_to_model(model, parameters)
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(test.x))
        labels = torch.from_numpy(test.y)
        loss = float(nn.functional.cross_entropy(logits, labels))
        accuracy = float((logits.argmax(dim=1) == labels).double().mean())
    return Evaluation(accuracy=accuracy, loss=loss)
