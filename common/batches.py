"""How many samples a step trains on (``batch-policy``): read by a streaming client for each
step and by the server for the bounds of what a reply may claim."""

from __future__ import annotations

import sys
from collections.abc import Callable

from common.settings import Settings


def _fixed(arrived: int, batch_size: int, batch_min: int, batch_max: int) -> int:
    return batch_size


def _rate(arrived: int, batch_size: int, batch_min: int, batch_max: int) -> int:
    return min(max(arrived, batch_min), batch_max)


# batch-policy -> the step's batch from (arrived, batch-size, batch-min, batch-max)
BATCH_POLICIES: dict[str, Callable[[int, int, int, int], int]] = {"fixed": _fixed, "rate": _rate}


def largest_batch(settings: Settings) -> int:
    """The largest batch a step of this run can take: its batch policy's, when more samples
    arrived than any step takes."""
    streams, plenty = settings.streams, sys.maxsize
    policy = BATCH_POLICIES[streams.batch_policy]
    return policy(plenty, settings.training.batch_size, streams.batch_min, streams.batch_max)


def check(settings: Settings) -> list[str]:
    """A buffer smaller than the largest batch could never fill one."""
    largest, capacity = largest_batch(settings), settings.streams.buffer_capacity
    if 0 < capacity < largest:
        return [
            f"buffer-capacity ({capacity}) is smaller than the largest batch ({largest}); use "
            f"0 (no limit) or at least {largest}"
        ]
    return []
