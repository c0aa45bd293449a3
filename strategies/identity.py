"""Which node speaks for which partition: bound on the first accepted reply.

A node cannot reply for a partition bound to another node that is still connected (was sent
this round's instruction). A restarted device comes back as a new node: it takes its partition
over once the old node is gone (no longer connected: the SuperLink drops a node silent for twice
its heartbeat interval, a minute at Flower's default). A partition nobody holds yet, claimed by
several nodes in one round, goes to the one connected longest (the lowest node id among those
first seen in one round) whose reply passes every other check, and the others are refused
alone: refusing every claimant let a node that never binds keep a chosen device out for the
whole run. Without SuperNode authentication the server cannot tell a device from an impostor
that connected first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from state.archive import StateError
from state.fields import Fields, int_keys
from wire.fields import is_integer


class Identities:
    def __init__(self) -> None:
        self.partition_of: dict[int, int] = {}  # node id -> partition id
        self.owner_of: dict[int, int] = {}  # partition id -> node id
        self.first_seen: dict[int, int] = {}  # node id -> the round it was first seen connected

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        return {
            "schema": self.STATE_SCHEMA,
            "partition_of": int_keys(self.partition_of),
            "owner_of": int_keys(self.owner_of),
            "first_seen": int_keys(self.first_seen),
        }

    def load_state_dict(self, state: object) -> None:
        fields = Fields("identities", state, self.STATE_SCHEMA)
        self.partition_of = fields.int_map("partition_of", _whole)
        self.owner_of = fields.int_map("owner_of", _whole)
        self.first_seen = fields.int_map("first_seen", _whole)
        fields.done()
        bound = {(n, p) for n, p in self.partition_of.items()}
        if bound != {(n, p) for p, n in self.owner_of.items()}:
            raise StateError("identities: partition_of and owner_of do not agree")

    def saw(self, connected: Iterable[int], server_round: int) -> None:
        for node in connected:
            self.first_seen.setdefault(node, server_round)

    def seniority(self, node: int) -> tuple[float, int]:
        """Sort key: replies are judged longest connected first (then by node id), so of
        several first claims of a partition the senior one that passes every check binds it."""
        return self.first_seen.get(node, float("inf")), node

    def check(self, node: int, partition: int, connected: Collection[int]) -> None:
        """ValueError when ``node`` may not reply for ``partition`` this round."""
        held = self.partition_of.get(node)
        if held is not None and held != partition:
            raise ValueError(f"partition-id {partition}, but this node is partition {held}")
        owner = self.owner_of.get(partition)
        if owner is not None and owner != node and owner in connected:
            raise ValueError(f"partition-id {partition} belongs to node {owner}")

    def bind(self, node: int, partition: int) -> None:
        previous = self.owner_of.get(partition)
        if previous is not None and previous != node:
            self.partition_of.pop(previous, None)  # the old node is gone
        self.owner_of[partition] = node
        self.partition_of[node] = partition


def _whole(value: object) -> int:
    if not is_integer(value) or value < 0:
        raise ValueError(f"{value!r} is not a node id, partition or round")
    return value
