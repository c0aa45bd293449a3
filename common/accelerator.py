"""Where local training runs: the ``device`` setting's choices and what this machine has.

A choice is resolved on the machine that trains: the simulation host (its launcher checks it
before anything starts), a device's agent (its ``--device``, checked when it starts), each
ClientApp process of Flower's own SuperNodes. ``auto`` takes the first of CUDA, MPS (Apple's
GPU) and the CPU that the machine has, so an agent on a Jetson trains on its GPU. The model and
its batches live there for local training only: the update comes back to the CPU as numpy
before error feedback, compression and the wire, which are numpy code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

AUTO = "auto"
# device -> the torch device types it takes, the first this machine has
DEVICES: dict[str, tuple[str, ...]] = {
    AUTO: ("cuda", "mps", "cpu"),
    "cpu": ("cpu",),
    "cuda": ("cuda",),
    "mps": ("mps",),
}
# torch device type -> whether this machine has it (looked up at each call: tests patch torch)
AVAILABLE: dict[str, Callable[[], bool]] = {
    "cuda": lambda: torch.cuda.is_available(),
    "mps": lambda: torch.backends.mps.is_available(),
    "cpu": lambda: True,
}
# why a machine lacks it, in the words of the check that said so
MISSING = {
    "cuda": "torch.cuda.is_available() is False (no NVIDIA GPU, no driver, or a CPU build of "
    "torch)",
    "mps": "torch.backends.mps.is_available() is False (not an Apple-silicon Mac, or macOS "
    "before 12.3)",
}


def resolve(choice: str, *, key: str = "device") -> torch.device:
    """The torch device ``choice`` means on this machine.

    Raises
    ------
    ValueError
        Naming ``key`` when this machine has none of what ``choice`` takes, or an unknown
        choice.
    """
    if choice not in DEVICES:
        raise ValueError(f"{key} = {choice!r} is not allowed; allowed values: {', '.join(DEVICES)}")
    for kind in DEVICES[choice]:
        if AVAILABLE[kind]():
            return torch.device(kind)
    why = "; ".join(MISSING[kind] for kind in DEVICES[choice] if kind in MISSING)
    raise ValueError(
        f"{key} = {choice!r}, but this machine has none: {why}; choose {key} = 'auto' (a GPU "
        "where there is one, else the CPU) or 'cpu'"
    )


def ray_gpus_per_client(choice: str, clients_at_once: int) -> float:
    """What each simulated client's Ray actor asks for of this machine's GPU: a share that
    lets ``clients_at_once`` actors train on one GPU together when ``choice`` resolves to
    CUDA here, else 0. (Ray hides the GPUs from an actor that asks for none: there ``auto``
    would pick the CPU, ``cuda`` fail.)"""
    return 1.0 / clients_at_once if resolve(choice).type == "cuda" else 0.0
