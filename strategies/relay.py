"""ScaDLES data injection against non-IID data: the server's relay.

Each round a random ``alpha`` share of the clients (seeded by round) is asked to share a
``beta`` share of its current batch: raw samples (features and label) in its reply. The server
keeps them for one round and relays them with the next round's instructions to every other
client, which adds them to its next batch. Who shared what is never sent on: a receiver gets
samples without their source. The bytes are counted where they travel (the reply's and the
instruction's sizes), so the virtual clock charges them like any other transfer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict

from state.archive import StateError
from state.fields import Fields
from wire.fields import is_integer
from wire.injection import Samples, with_samples
from wire.keys import INJECT_KEY, SAMPLES_Y
from wire.nbytes import content_nbytes


@dataclass(frozen=True)
class InjectionPlan:
    alpha: float  # share of clients asked each round
    beta: float  # share of its batch a chosen client sends
    seed: int
    num_features: int
    num_classes: int
    feature_range: tuple[float, float] = (-math.inf, math.inf)  # what the data set holds

    def sharers(self, server_round: int, num_clients: int) -> list[int]:
        """Partition ids asked to share this round (at least one when alpha > 0)."""
        count = min(num_clients, max(1, round(self.alpha * num_clients)))
        rng = np.random.default_rng([self.seed, 0x1A, server_round])
        return sorted(int(p) for p in rng.choice(num_clients, size=count, replace=False))

    def check(self, record: ArrayRecord, batch: int) -> Samples:
        """The samples a reply shares, checked; ValueError names what is wrong."""
        samples = Samples.parse(record)
        x, y = samples.x, samples.y
        if x.ndim != 2 or x.shape[1] != self.num_features or y.shape != (x.shape[0],):
            raise ValueError(
                f"{INJECT_KEY}: expected x of shape (n, {self.num_features}) and y of shape "
                f"(n,), got {x.shape} and {y.shape}"
            )
        allowed = math.ceil(self.beta * batch)
        if x.shape[0] > allowed:
            raise ValueError(f"{INJECT_KEY}: {x.shape[0]} samples, more than β x batch = {allowed}")
        if not np.all(np.isfinite(x)) or np.any((y < 0) | (y >= self.num_classes)):
            raise ValueError(
                f"{INJECT_KEY}: non-finite features or labels outside 0..{self.num_classes - 1}"
            )
        low, high = self.feature_range
        if x.size and (x.min() < low or x.max() > high):
            raise ValueError(
                f"{INJECT_KEY}: features in [{x.min():g}, {x.max():g}], outside the data set's "
                f"[{low:g}, {high:g}]"
            )
        return Samples(x.astype(np.float32), y.astype(np.int64))


@dataclass
class Relay:
    """Samples shared in one round, relayed with the next round's instructions."""

    plan: InjectionPlan
    _pool: list[tuple[int, Samples]] = field(default_factory=list)  # (source partition, samples)
    stats: dict[str, Any] | None = None  # this round's counts, for the record
    relayed_to: dict[int, int] = field(default_factory=dict)  # node -> samples this round

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """The samples shared in the last round, for the next one's instructions."""
        return {
            "schema": self.STATE_SCHEMA,
            "pool": [[source, s.x, s.y] for source, s in self._pool],
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("relay", state, self.STATE_SCHEMA)
        pool = fields.raw("pool")
        fields.done()
        if not isinstance(pool, list):
            raise StateError("relay: pool is not a list")
        self._pool = [self._shared(entry) for entry in pool]

    def _shared(self, entry: Any) -> tuple[int, Samples]:
        """One pooled share read back: [source partition, x, y] of this data set's samples."""
        plan = self.plan
        if not (isinstance(entry, list) and len(entry) == 3 and is_integer(entry[0])):
            raise StateError("relay: a pool entry is not [partition, x, y]")
        source, x, y = entry
        arrays = isinstance(x, np.ndarray) and isinstance(y, np.ndarray)
        if not arrays or x.dtype != np.float32 or y.dtype != np.int64:
            raise StateError("relay: a pool entry's samples are not float32 x and int64 y")
        shaped = x.ndim == 2 and x.shape[1] == plan.num_features and y.shape == (x.shape[0],)
        if not shaped or not np.all(np.isfinite(x)) or np.any((y < 0) | (y >= plan.num_classes)):
            raise StateError("relay: pooled samples that are not this data set's")
        return source, Samples(x.copy(), y.copy())

    def attach(self, messages: list[Message], partition_of: dict[int, int]) -> list[Message]:
        """Each message gets last round's shared samples from the others (then the pool empties)."""
        out, relayed_samples, relayed_bytes = [], 0, 0
        self.relayed_to = {}
        for m in messages:
            record = self._record_for(partition_of.get(m.metadata.dst_node_id))
            if record is None:
                out.append(m)
                continue
            count = int(record[SAMPLES_Y].numpy().size)
            self.relayed_to[m.metadata.dst_node_id] = count
            relayed_samples += count
            relayed_bytes += content_nbytes(RecordDict({INJECT_KEY: record}))
            out.append(
                Message(
                    content=with_samples(m.content, record),
                    message_type=m.metadata.message_type,
                    dst_node_id=m.metadata.dst_node_id,
                )
            )
        self.stats = {
            "relayed_samples": relayed_samples,
            "relayed_bytes_down": relayed_bytes,
            "shared_samples": 0,
            "shared_bytes_up": 0,
        }
        self._pool = []
        return out

    def keep(self, partition_id: int, samples: Samples, record: ArrayRecord) -> None:
        """What an accepted reply shares, for next round, and its count."""
        self._pool.append((partition_id, samples))
        if self.stats is not None:
            self.stats["shared_samples"] += int(samples.y.size)
            self.stats["shared_bytes_up"] += content_nbytes(RecordDict({INJECT_KEY: record}))

    def _record_for(self, partition_id: int | None) -> ArrayRecord | None:
        """Everything shared by the others (all of it if the receiver is not known yet)."""
        # By source, not arrival order: the same run relays the same bytes.
        ordered = sorted(self._pool, key=lambda item: item[0])
        chosen = [s for source, s in ordered if source != partition_id]
        if not chosen:
            return None
        return Samples(
            np.concatenate([s.x for s in chosen]), np.concatenate([s.y for s in chosen])
        ).to_record()
