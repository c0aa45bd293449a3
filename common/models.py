"""Model registry: a small MLP (default), the same MLP with batch normalisation, and a small CNN."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from common.data import DataSpec


def mlp(spec: DataSpec) -> nn.Module:
    """64-256-128-10 on digits: 50,826 parameters."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(spec.num_features, 256),
        nn.ReLU(),
        nn.Linear(256, 128),
        nn.ReLU(),
        nn.Linear(128, spec.num_classes),
    )


def mlp_bn(spec: DataSpec) -> nn.Module:
    """The MLP with batch normalisation after each hidden layer: 51,594 parameters on digits.

    Batch statistics are what single-label client batches distort (the ScaDLES paper's non-IID
    failure), so this is the model for non-IID experiments that need that mechanism.
    """
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(spec.num_features, 256),
        nn.BatchNorm1d(256),
        nn.ReLU(),
        nn.Linear(256, 128),
        nn.BatchNorm1d(128),
        nn.ReLU(),
        nn.Linear(128, spec.num_classes),
    )


def cnn(spec: DataSpec) -> nn.Module:
    """Two 3x3 convolutions, one 2x2 pool, two dense layers: 55,018 parameters on digits."""
    channels, height, width = spec.image_shape
    flat = 32 * (height // 2) * (width // 2)
    return nn.Sequential(
        nn.Unflatten(1, spec.image_shape),
        nn.Conv2d(channels, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(flat, 96),
        nn.ReLU(),
        nn.Linear(96, spec.num_classes),
    )


MODELS: dict[str, Callable[[DataSpec], nn.Module]] = {"mlp": mlp, "mlp-bn": mlp_bn, "cnn": cnn}


def build_model(name: str, spec: DataSpec, seed: int) -> nn.Module:
    """Build ``name`` with weights drawn from ``seed`` without touching the global RNG."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODELS[name](spec)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_model_fits(name: str, spec: DataSpec) -> None:
    """ConfigError unless model ``name`` can be built for samples of ``spec``'s shape."""
    from common.settings import ConfigError

    _, height, width = spec.image_shape
    if name == "cnn" and (height < 2 or width < 2):
        raise ConfigError(
            f"model = 'cnn' needs images of at least 2 x 2 pixels; the data's samples are "
            f"{spec.image_shape} (channels, height, width)"
        )
