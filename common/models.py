"""Model registry: a small MLP (default), the MLP with batch normalisation, a small CNN and a
residual CNN; for 1-D signals (MNIST-1D) the MNIST-1D paper's MLP and CNN, the CNN also with
batch norm or group norm; an MLP of ResNet-18's size (for the state store); or the user's own,
named ``package.module:factory``."""

from __future__ import annotations

import importlib
import inspect
import math
import sys
import types
from collections.abc import Callable

import torch
from torch import nn

from common.data import DataSpec
from common.settings import REFERENCE


def _mlp(spec: DataSpec, hidden: tuple[int, ...]) -> nn.Module:
    """Dense layers of ``hidden`` widths with ReLU between them."""
    widths = (spec.num_features, *hidden)
    layers: list[nn.Module] = [nn.Flatten()]
    for width_in, width_out in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], spec.num_classes))


def mlp(spec: DataSpec) -> nn.Module:
    """64-256-128-10 on digits: 50,826 parameters."""
    return _mlp(spec, (256, 128))


RESNET18_SIZE_WIDTH = 3300  # two hidden layers: 11.1 M parameters, ResNet-18's size


def mlp_11m(spec: DataSpec) -> nn.Module:
    """The MLP with two hidden layers of 3,300: ResNet-18's size (11.2 M parameters on
    CIFAR-10), 11.1 M here (Synthetic and digits), for what a large model's client state
    costs (a residual and a replica: 89 MB a client, the state store's case), at 66 MFLOP a
    training sample, not ResNet-18's 1.7 GFLOP."""
    return _mlp(spec, (RESNET18_SIZE_WIDTH, RESNET18_SIZE_WIDTH))


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


class ResidualBlock(nn.Module):
    """Two 3x3 convolutions with batch norm, added to the input (a 1x1 convolution matches
    the shapes where the block changes channels or resolution), as in He et al. 2016."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(channels_out),
            nn.ReLU(),
            nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels_out),
        )
        same = stride == 1 and channels_in == channels_out
        self.shortcut: nn.Module = (
            nn.Identity()
            if same
            else nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False),
                nn.BatchNorm2d(channels_out),
            )
        )
        self.out = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x) + self.shortcut(x))


RESNET_WIDTH = 32  # channels of the stem and of every block
RESNET_BLOCKS = 3
RESNET_SIDE = 16  # small images are upsampled until their shorter side is at least this


def resnet(spec: DataSpec) -> nn.Module:
    """A residual CNN with batch norm for small images: nearest-neighbour upsampling to a
    shorter side of at least 16 pixels (digits: 8x8 -> 16x16), a 3x3 stem of 32 channels,
    three residual blocks of 32 channels, global average pooling, one dense layer; 56,362
    parameters on digits, about as many as the MLP, for 316x its training FLOPs per sample. Sized
    for the mixed regime: a Pi 4's step of 32 samples takes about as long as sending its dense
    update at 10 Mbit/s (docs/clock.md, "Compute from FLOPs")."""
    channels, height, width = spec.image_shape
    scale = max(1, math.ceil(RESNET_SIDE / min(height, width)))
    layers: list[nn.Module] = [
        nn.Unflatten(1, spec.image_shape),
        nn.Upsample(scale_factor=scale, mode="nearest"),
        nn.Conv2d(channels, RESNET_WIDTH, 3, padding=1, bias=False),
        nn.BatchNorm2d(RESNET_WIDTH),
        nn.ReLU(),
    ]
    layers += [ResidualBlock(RESNET_WIDTH, RESNET_WIDTH, 1) for _ in range(RESNET_BLOCKS)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(RESNET_WIDTH, spec.num_classes)]
    return nn.Sequential(*layers)


def mlp100(spec: DataSpec) -> nn.Module:
    """The MNIST-1D paper's MLP: two hidden layers of 100, ReLU; 15,210 parameters on MNIST-1D."""
    return _mlp(spec, (100, 100))


CNN1D_CHANNELS = 25
CNN1D_KERNELS = (5, 3, 3)  # each with stride 2 and padding 1


def _cnn1d(spec: DataSpec, norm: Callable[[int], nn.Module] | None) -> nn.Module:
    """The MNIST-1D paper's CNN: three 1-D convolutions of 25 channels, stride 2, ReLU, then
    one dense layer; a sample's features are one signal per channel (digits: 64 samples)."""
    channels, height, width = spec.image_shape
    length = height * width
    layers: list[nn.Module] = [nn.Unflatten(1, (channels, length))]
    for kernel in CNN1D_KERNELS:
        layers.append(nn.Conv1d(channels, CNN1D_CHANNELS, kernel, stride=2, padding=1))
        layers += [norm(CNN1D_CHANNELS)] if norm is not None else []
        layers.append(nn.ReLU())
        channels, length = CNN1D_CHANNELS, (length + 2 - kernel) // 2 + 1
    layers += [nn.Flatten(), nn.Linear(channels * length, spec.num_classes)]
    return nn.Sequential(*layers)


def cnn1d(spec: DataSpec) -> nn.Module:
    """The paper's CNN as published: 5,210 parameters on MNIST-1D (its 94 % model)."""
    return _cnn1d(spec, None)


def cnn1d_bn(spec: DataSpec) -> nn.Module:
    """The CNN with batch norm after each convolution: running statistics are buffers, which
    every round sends whole (the model for what batch norm does under Top-k)."""
    return _cnn1d(spec, nn.BatchNorm1d)


def cnn1d_gn(spec: DataSpec) -> nn.Module:
    """The CNN with group norm (5 groups of 5 channels): normalised like ``cnn1d-bn`` but from
    each sample alone, so no statistics to carry: the control for ``cnn1d-bn``."""
    return _cnn1d(spec, lambda channels: nn.GroupNorm(5, channels))


ModelFactory = Callable[[DataSpec], nn.Module]
MODELS: dict[str, ModelFactory] = {
    "mlp": mlp,
    "mlp-bn": mlp_bn,
    "cnn": cnn,
    "resnet": resnet,
    "mlp100": mlp100,
    "cnn1d": cnn1d,
    "cnn1d-bn": cnn1d_bn,
    "cnn1d-gn": cnn1d_gn,
    "mlp-11m": mlp_11m,
}


def model_factory(name: str) -> ModelFactory:
    """The registry's factory ``name``, or the callable a ``package.module:factory`` names."""
    if name in MODELS:
        return MODELS[name]
    if REFERENCE.match(name) is None:  # a user's model: "package.module:factory"
        raise ValueError(
            f"unknown model {name!r}; allowed: {', '.join(MODELS)}, or package.module:factory"
        )
    module_name, attribute = name.split(":")
    if module_name.split(".")[0] in sys.stdlib_module_names:
        raise ValueError(f"model = {name!r}: {module_name!r} is Python's, not a model's module")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"model = {name!r}: cannot import {module_name!r} ({exc})") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"model = {name!r}: {module_name!r} has no callable {attribute!r}")
    _check_factory(name, module_name, factory)
    return factory  # type: ignore[no-any-return]


def _check_factory(name: str, module_name: str, factory: object) -> None:
    """A model factory is a Python function of the named module (not of Python's own library:
    that is checked before the import), taking the data spec as its one required argument;
    anything else is refused before it is called (``model = "shutil:rmtree"`` must not run)."""
    if not isinstance(factory, types.FunctionType) or factory.__module__ != module_name:
        raise ValueError(f"model = {name!r}: not a function defined in {module_name!r}")
    required = [
        p
        for p in inspect.signature(factory).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    others = [
        p
        for p in inspect.signature(factory).parameters.values()
        if p.default is p.empty and p.kind is p.KEYWORD_ONLY
    ]
    if len(required) != 1 or others:
        raise ValueError(
            f"model = {name!r}: a factory takes one required argument (the data spec), "
            f"not {[p.name for p in required + others]}"
        )


def build_model(name: str, spec: DataSpec, seed: int) -> nn.Module:
    """Build ``name`` with weights drawn from ``seed`` without touching the global RNG."""
    factory = model_factory(name)
    with torch.random.fork_rng(devices=[]):
        # The CPU generator only, the one the weights are drawn from: torch.manual_seed also
        # queues a seed for every accelerator, capturing a stack trace each time (a sixth of a
        # dense client's training message, profiled), and fork_rng(devices=[]) restores only
        # the CPU's.
        torch.default_generator.manual_seed(seed)
        model = factory(spec)
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model = {name!r}: the factory returned {type(model).__name__}, not an nn.Module"
        )
    return model


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
