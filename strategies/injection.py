"""ScaDLES data injection against non-IID data: the server side.

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

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from numpy.typing import NDArray

from wire.keys import INJECT_KEY


@dataclass(frozen=True)
class InjectionPlan:
    alpha: float  # share of clients asked each round
    beta: float  # share of its batch a chosen client sends
    seed: int
    num_features: int
    num_classes: int

    def sharers(self, server_round: int, num_clients: int) -> list[int]:
        """Partition ids asked to share this round (at least one when alpha > 0)."""
        count = min(num_clients, max(1, round(self.alpha * num_clients)))
        rng = np.random.default_rng([self.seed, 0x1A, server_round])
        return sorted(int(p) for p in rng.choice(num_clients, size=count, replace=False))


def shared_record(x: NDArray[np.float32], y: NDArray[np.int64]) -> ArrayRecord:
    return ArrayRecord({"x": Array(np.ascontiguousarray(x)), "y": Array(np.ascontiguousarray(y))})


SharedSamples = tuple[NDArray[np.float32], NDArray[np.int64]]  # features, labels


def parse_shared(content: RecordDict, plan: InjectionPlan, batch: int) -> SharedSamples | None:
    """The samples a reply shares (None if it shares none); ValueError names what is wrong."""
    if INJECT_KEY not in content.array_records:
        return None
    record = content.array_records[INJECT_KEY]
    if set(record) != {"x", "y"}:
        raise ValueError(f"{INJECT_KEY} must hold arrays 'x' and 'y', got {sorted(record)}")
    if record["x"].dtype != "float32" or record["y"].dtype != "int64":
        raise ValueError(f"{INJECT_KEY}: x must be float32 and y int64")
    x, y = record["x"].numpy(), record["y"].numpy()
    if x.ndim != 2 or x.shape[1] != plan.num_features or y.shape != (x.shape[0],):
        raise ValueError(
            f"{INJECT_KEY}: expected x of shape (n, {plan.num_features}) and y of shape (n,), "
            f"got {x.shape} and {y.shape}"
        )
    allowed = math.ceil(plan.beta * batch)
    if x.shape[0] > allowed:
        raise ValueError(f"{INJECT_KEY}: {x.shape[0]} samples, more than β x batch = {allowed}")
    if not np.all(np.isfinite(x)) or np.any((y < 0) | (y >= plan.num_classes)):
        raise ValueError(
            f"{INJECT_KEY}: non-finite features or labels outside 0..{plan.num_classes - 1}"
        )
    return x.astype(np.float32), y.astype(np.int64)


@dataclass
class RelayPool:
    """Samples shared in one round, to be relayed in the next."""

    sources: list[int] = field(default_factory=list)  # partition id per block
    blocks: list[tuple[NDArray[np.float32], NDArray[np.int64]]] = field(default_factory=list)

    def add(self, partition_id: int, x: NDArray[np.float32], y: NDArray[np.int64]) -> None:
        self.sources.append(partition_id)
        self.blocks.append((x, y))

    def samples(self) -> int:
        return sum(int(y.size) for _, y in self.blocks)

    def record_for(self, partition_id: int | None) -> ArrayRecord | None:
        """Everything shared by the others (all of it if the receiver is not known yet)."""
        # By source, not arrival order: the same run relays the same bytes.
        order = sorted(range(len(self.sources)), key=lambda i: self.sources[i])
        chosen = [self.blocks[i] for i in order if self.sources[i] != partition_id]
        if not chosen:
            return None
        return shared_record(
            np.concatenate([x for x, _ in chosen]), np.concatenate([y for _, y in chosen])
        )
