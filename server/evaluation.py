"""Centralized evaluation of the global model on the server's held-out test split, and the
batch-norm diagnosis beside it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from common.batch_norm import recompute_statistics, statistics_positions
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


class BatchNormDiagnosis:
    """``batch-norm-diagnosis``: per round, test accuracy with batch-norm statistics recomputed
    on the validation split at the evaluated weights (``recomputed_accuracy``), and at the
    previous round's weights (``lagged_recomputed_accuracy``: what clients could measure at
    the start of a round, with no extra exchange)."""

    def __init__(self, model: nn.Module, validation: ArrayData | None, test: ArrayData) -> None:
        if validation is None:
            raise ValueError("batch-norm-diagnosis needs validation-fraction > 0")
        self.model, self.validation, self.test = model, validation, test
        self.positions = statistics_positions(model)
        self.previous: NDArray[np.float32] | None = None  # last round's recomputed statistics

    def __call__(self, vector: NDArray[np.float32]) -> dict[str, float]:
        current = recompute_statistics(self.model, vector, self.validation)
        statistics = current[self.positions]
        lagged = vector.copy()
        lagged[self.positions] = statistics if self.previous is None else self.previous
        self.previous = statistics
        return {
            "recomputed_accuracy": evaluate(self.model, current, self.test).accuracy,
            "lagged_recomputed_accuracy": evaluate(self.model, lagged, self.test).accuracy,
        }
