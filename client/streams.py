"""Where a streaming client's samples come from, in virtual time.

``StreamSource`` is the interface a real source (a sensor, a message broker) would implement:
it hands out the ids of samples that arrived up to a time, and says when a given number of
further samples will have arrived. ``ReplayStream`` replays a client's partition at rate S
(samples/s): sample j arrives at the moment the cumulative count S·t passes j + 1, in an order
reshuffled (seeded) on every pass over the partition. Its whole state is two numbers (the
time it has been read up to and the fractional count arrived by then), kept in the node's
``context.state`` between the ephemeral ClientApp calls.

In simulation the times are virtual (the server's round start plus waits). On a device
(timing = "measured") ``WallClock`` supplies them: seconds since the node's stream began, kept
in ``context.state``, so samples keep arriving at the device's rate in wall-clock time while it
trains, waits or sits between rounds, with no thread to keep alive across the ClientApp
processes Flower starts per message. A live source (a sensor, a broker) would buffer its
samples in a local store written by its own process and implement ``StreamSource`` over it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from numpy.typing import NDArray

STREAM_STATE_KEY = "stream"
WALL_CLOCK_STATE_KEY = "stream-wall-clock"
_EPS = 1e-9  # a wait computed by time_until lands exactly on an arrival despite rounding


def _count(arrived: float) -> int:
    return math.floor(arrived + _EPS)


class StreamSource(Protocol):
    @property
    def rate(self) -> float:
        """Samples/s now."""
        ...

    def read_until(self, time_s: float) -> NDArray[np.int64]:
        """Ids of the samples that arrived since the last read, up to ``time_s``."""
        ...

    def time_until(self, count: int) -> float:
        """Seconds from the last read until ``count`` more samples have arrived."""
        ...


class ReplayStream:
    """A partition of ``size`` samples replayed at ``rate`` samples/s."""

    def __init__(
        self,
        size: int,
        rate: float,
        seed: int | tuple[int, ...],
        *,
        clock_s: float = 0.0,
        arrived: float = 0.0,
    ) -> None:
        if size <= 0:
            raise ValueError(f"a stream needs at least one sample, got {size}")
        self.size = size
        self.seed = (seed,) if isinstance(seed, int) else tuple(seed)
        self.rate = rate
        self.clock_s, self.arrived = clock_s, arrived
        self._orders: dict[int, NDArray[np.int64]] = {}

    @property
    def rate(self) -> float:
        return self._rate

    @rate.setter
    def rate(self, value: float) -> None:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"stream rate must be a finite number > 0, got {value}")
        self._rate = float(value)

    def _order(self, pass_index: int) -> NDArray[np.int64]:
        if pass_index not in self._orders:
            rng = np.random.default_rng([*self.seed, 0x57E4, pass_index])
            self._orders[pass_index] = rng.permutation(self.size).astype(np.int64)
        return self._orders[pass_index]

    def _ids(self, first: int, stop: int) -> NDArray[np.int64]:
        """Ids of arrivals first, ..., stop − 1 (arrival j is pass j // size, slot j % size)."""
        positions = np.arange(first, stop, dtype=np.int64)
        out = np.empty(positions.size, dtype=np.int64)
        for pass_index in np.unique(positions // self.size):
            mask = positions // self.size == pass_index
            out[mask] = self._order(int(pass_index))[positions[mask] % self.size]
        return out

    def read_until(self, time_s: float) -> NDArray[np.int64]:
        if time_s < self.clock_s - 1e-12:
            raise ValueError(f"stream read at {time_s} s, before its last read at {self.clock_s} s")
        before = _count(self.arrived)
        self.arrived += self._rate * max(0.0, time_s - self.clock_s)
        self.clock_s = max(self.clock_s, time_s)
        return self._ids(before, _count(self.arrived))

    def time_until(self, count: int) -> float:
        if count <= 0:
            return 0.0
        target = _count(self.arrived) + count
        return (target - self.arrived) / self._rate

    # --- persistence across ClientApp calls -------------------------------------------------

    def to_state(self, state: RecordDict) -> None:
        state[STREAM_STATE_KEY] = ConfigRecord({"clock-s": self.clock_s, "arrived": self.arrived})

    @classmethod
    def from_state(
        cls, state: RecordDict, size: int, rate: float, seed: int | tuple[int, ...]
    ) -> ReplayStream:
        """The stream as last saved, at this round's ``rate`` (a new one if none saved)."""
        if STREAM_STATE_KEY not in state.config_records:
            return cls(size, rate, seed)
        saved = state.config_records[STREAM_STATE_KEY]
        return cls(
            size,
            rate,
            seed,
            clock_s=float(saved["clock-s"]),  # type: ignore[arg-type]
            arrived=float(saved["arrived"]),  # type: ignore[arg-type]
        )


class WallClock:
    """Stream time on a device: wall-clock seconds since the node's stream began."""

    def __init__(
        self,
        epoch: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.epoch = epoch
        self._clock, self._sleep = clock, sleep

    def now_s(self) -> float:
        return max(0.0, self._clock() - self.epoch)

    def wait(self, seconds: float) -> None:
        """Block while samples arrive (the fixed batch policy's wait, or batch-min's)."""
        if seconds > 0:
            self._sleep(seconds)

    @classmethod
    def from_state(
        cls,
        state: RecordDict,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> WallClock:
        """The node's stream clock; the first call starts it (and saves its epoch)."""
        if WALL_CLOCK_STATE_KEY not in state.config_records:
            state[WALL_CLOCK_STATE_KEY] = ConfigRecord({"epoch": clock()})
        epoch = float(state.config_records[WALL_CLOCK_STATE_KEY]["epoch"])  # type: ignore[arg-type]
        return cls(epoch, clock, sleep)
