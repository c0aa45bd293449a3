"""A streaming client's buffer of samples not yet trained on (ids into its partition).

``persistence`` keeps every sample until it is trained on (first in, first out), so a stream
faster than training piles up. ``truncation`` drops what a step left over: the buffer only
ever holds what arrived since the last step. An optional capacity (0: none) drops the oldest
samples first. Kept in ``context.state`` between ClientApp calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from numpy.typing import NDArray

from client.streams import StreamSource
from common.batches import BATCH_POLICIES

BUFFER_STATE_KEY = "stream-buffer"
# buffer-policy -> whether a step drops what it leaves (persistence keeps every sample)
BUFFER_POLICIES: dict[str, bool] = {"persistence": False, "truncation": True}


class StreamBuffer:
    def __init__(
        self, policy: str, capacity: int = 0, ids: NDArray[np.int64] | None = None
    ) -> None:
        if policy not in BUFFER_POLICIES:
            raise ValueError(f"buffer-policy = {policy!r}; allowed: {', '.join(BUFFER_POLICIES)}")
        if capacity < 0:
            raise ValueError(f"buffer capacity must be >= 0 (0: unbounded), got {capacity}")
        self.policy, self.capacity = policy, capacity
        self.ids = np.zeros(0, dtype=np.int64) if ids is None else ids.astype(np.int64)
        self.dropped = 0  # samples lost to capacity or truncation since this object was made

    def __len__(self) -> int:
        return int(self.ids.size)

    def add(self, ids: NDArray[np.int64]) -> None:
        self.ids = np.concatenate([self.ids, ids.astype(np.int64)])
        if self.capacity and self.ids.size > self.capacity:
            self.dropped += int(self.ids.size - self.capacity)
            self.ids = self.ids[-self.capacity :]

    def take(self, count: int) -> NDArray[np.int64]:
        """The ``count`` oldest samples (fewer if the buffer holds fewer), removed."""
        if count < 0:
            raise ValueError(f"cannot take {count} samples")
        batch, self.ids = self.ids[:count], self.ids[count:]
        return batch

    def end_step(self) -> None:
        """After a training step: truncation drops the leftovers."""
        if BUFFER_POLICIES[self.policy]:
            self.dropped += len(self)
            self.ids = self.ids[:0]

    # --- persistence across ClientApp calls -------------------------------------------------

    def to_state(self, state: RecordDict) -> None:
        state[BUFFER_STATE_KEY] = ArrayRecord({"ids": Array(self.ids)})

    @classmethod
    def from_state(cls, state: RecordDict, policy: str, capacity: int) -> StreamBuffer:
        if BUFFER_STATE_KEY not in state.array_records:
            return cls(policy, capacity)
        ids = state.array_records[BUFFER_STATE_KEY]["ids"].numpy()
        return cls(policy, capacity, ids)


@dataclass(frozen=True)
class StreamStep:
    """One training step's data on a streaming client."""

    batch: NDArray[np.int64]  # sample ids, oldest first
    wait_s: float  # virtual time spent waiting for samples before the step
    arrived: int  # samples that arrived since the last step (this step's wait included)
    occupancy: int  # samples buffered when the batch was drawn


def next_step(
    source: StreamSource,
    buffer: StreamBuffer,
    start_s: float,
    policy: str,
    *,
    batch_size: int,
    batch_min: int,
    batch_max: int,
) -> StreamStep:
    """Read the stream up to ``start_s``, wait if the policy needs more, draw the batch.

    ``fixed``: ``batch_size`` samples; a client with fewer buffered waits for them.
    ``rate`` (ScaDLES): what arrived since the last step, clamped to [batch_min, batch_max];
    the only wait is for the minimum.
    """
    if policy not in BATCH_POLICIES:
        raise ValueError(f"batch-policy = {policy!r}; allowed: {', '.join(BATCH_POLICIES)}")
    arrived = source.read_until(start_s)
    buffer.add(arrived)
    count = arrived.size
    need = BATCH_POLICIES[policy](count, batch_size, batch_min, batch_max)
    wait_s = 0.0
    if len(buffer) < need:
        wait_s = source.time_until(need - len(buffer))
        more = source.read_until(start_s + wait_s)
        buffer.add(more)
        count += more.size
    occupancy = len(buffer)
    batch = buffer.take(need)
    buffer.end_step()
    return StreamStep(batch=batch, wait_s=wait_s, arrived=count, occupancy=occupancy)
