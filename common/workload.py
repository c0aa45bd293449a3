"""What one training sample costs: a model's parameters and its training FLOPs per sample.

Counted once per run with PyTorch's own counter (``torch.utils.flop_counter``) on one forward
and backward pass, so the virtual clock charges compute in proportion to the model's work.
The counter counts matrix products and convolutions (the work that scales with the model);
element-wise operations and batch-norm statistics are left to the per-step overhead.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from common.data import DataSpec
from common.models import build_model, num_parameters

COUNT_BATCH = 4  # samples in the counted pass (batch norm needs more than one)


@dataclass(frozen=True)
class Workload:
    model: str
    parameters: int
    train_flops_per_sample: float  # forward + backward, as counted

    def to_record(self) -> dict[str, Any]:
        return asdict(self)


def _dummy_batch(spec: DataSpec, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.linspace(-1.0, 1.0, size * spec.num_features).reshape(size, spec.num_features)
    return x, torch.arange(size) % spec.num_classes


def train_flops_per_sample(model: nn.Module, spec: DataSpec) -> float:
    """FLOPs of one training pass (forward and backward) per sample, on a copy of ``model``."""
    trial = copy.deepcopy(model)
    trial.train()
    x, y = _dummy_batch(spec, COUNT_BATCH)
    with FlopCounterMode(display=False) as counter:
        nn.functional.cross_entropy(trial(x), y).backward()
    return counter.get_total_flops() / COUNT_BATCH


def check_workload(name: str, spec: DataSpec, seed: int) -> Workload:
    """Build model ``name`` for ``spec``'s samples, run a training pass (forward and backward) on
    a dummy batch and count its FLOPs; ValueError naming the model and what failed."""
    model = build_model(name, spec, seed)
    trial = copy.deepcopy(model)
    x, y = _dummy_batch(spec, COUNT_BATCH)
    try:
        logits = trial(x)
        if tuple(logits.shape) != (COUNT_BATCH, spec.num_classes):
            raise ValueError(
                f"a batch of {COUNT_BATCH} samples gave outputs of shape {tuple(logits.shape)}; "
                f"expected ({COUNT_BATCH}, {spec.num_classes}) (one logit per class)"
            )
        # Forward and backward: what can fail for a model. Not an optimizer step: its first use
        # imports torch's compiler (about 1 s), on the server, which never trains.
        nn.functional.cross_entropy(logits, y).backward()
    except Exception as exc:  # whatever the model raises names the model and the data
        raise ValueError(
            f"model = {name!r} cannot train on samples of shape {spec.image_shape} "
            f"(channels, height, width; {spec.num_features} features) with "
            f"{spec.num_classes} classes: {exc}"
        ) from exc
    if num_parameters(model) == 0:
        raise ValueError(f"model = {name!r} has no parameters to train")
    return Workload(name, num_parameters(model), train_flops_per_sample(model, spec))
