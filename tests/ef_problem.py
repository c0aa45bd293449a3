"""A problem on which Top-k without error feedback does not converge, and with it does.

Client i minimises f_i(x) = ½ ||x - c_i||² over a 4 x 3 matrix x (12 entries; a matrix, so
PowerSGD compresses it). Its first ``CANCELLING`` entries are +10 on even clients and -10 on odd
ones, and the rest are the same moderate targets everywhere (0.5 to 1.5): the optimum, the mean
of the c_i, is 0 there and those targets elsewhere. One local step from x sends
u_i = lr (c_i - x). Top-k with k = ``CANCELLING`` picks the cancelling entries every round (|10|
beats every other gap), their mean is 0, and without error feedback x never moves: the rest is
never sent. Error feedback keeps what was not sent, so the moderate entries grow until they are
sent, and x reaches the optimum up to the cancelling entries' share of a round. (In the spirit of
Beznosikov, Horváth, Richtárik and Safaryan, "On biased compression for distributed learning",
2020, who build a Top-1 example where the iterates diverge.)

A model (``matrix``, for ``model = "tests.ef_problem:matrix"``) and a trainer for the ClientApp
(``quadratic_step``): no data set is read.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Context
from torch import nn

from client.local_round import LocalRound
from client.node import node_identity
from client.training import TrainResult
from common.data import DataSpec
from common.settings import Settings
from wire.injection import Samples
from wire.train_instruction import RoundConfig, Vector

SHAPE = (4, 3)
SIZE = 12
CANCELLING = 2  # entries of +-10: as many as Top-k sends at c = 2 / 12
MODEL = f"{__name__}:matrix"


def matrix(spec: DataSpec) -> nn.Module:
    """The model: one 4 x 3 matrix, starting at zero."""
    module = nn.Module()
    module.x = nn.Parameter(torch.zeros(SHAPE))
    return module


def target(partition_id: int) -> Vector:
    c = np.empty(SIZE, dtype=np.float32)
    c[:CANCELLING] = 10.0 if partition_id % 2 == 0 else -10.0
    c[CANCELLING:] = np.linspace(0.5, 1.5, SIZE - CANCELLING)
    return c


def optimum(num_clients: int) -> Vector:
    targets = [target(i) for i in range(num_clients)]
    return np.mean(targets, axis=0).astype(np.float32)


def quadratic_step(
    context: Context,
    settings: Settings,
    model: nn.Module,
    config: RoundConfig,
    start: Vector,
    relayed: Samples | None,
    live: object = None,
) -> LocalRound:
    """One gradient step on f_i from the model the instruction brought: u = lr (c_i - x)."""
    partition_id = node_identity(context, settings)
    gap = target(partition_id) - start
    update = (np.float32(config.learning_rate) * gap).astype(np.float32)
    loss = 0.5 * float(gap.astype(np.float64) @ gap)
    examples = config.batch_size * config.local_steps
    return LocalRound(partition_id, TrainResult(update, examples, loss), None, None, 0.0)
