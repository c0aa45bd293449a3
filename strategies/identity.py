"""Which node speaks for which partition: bound on the first accepted reply.

A node cannot reply for a partition bound to another node that is still connected (was sent
this round's instruction). A restarted device comes back as a new node: it takes its partition
over once the old node is gone (no longer connected: the SuperLink drops a node silent for twice
its heartbeat interval, a minute at Flower's default). A partition nobody holds yet, claimed by
several nodes in one round, goes to the one connected longest (the lowest node id among those
first seen in one round), and the others are refused alone: refusing every claimant would let a
node that never binds keep a chosen device out for the whole run. Without SuperNode
authentication the server cannot tell a device from an impostor that connected first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import suppress

from flwr.app import Message

from wire.keys import METRICS_KEY, PARTITION_ID


class Identities:
    def __init__(self) -> None:
        self.partition_of: dict[int, int] = {}  # node id -> partition id
        self.owner_of: dict[int, int] = {}  # partition id -> node id
        self.first_seen: dict[int, int] = {}  # node id -> the round it was first seen connected

    def saw(self, connected: Iterable[int], server_round: int) -> None:
        for node in connected:
            self.first_seen.setdefault(node, server_round)

    @staticmethod
    def claims(replies: Iterable[Message]) -> dict[int, list[int]]:
        """Partition id -> the nodes whose replies of a round claim it (malformed claims left
        out)."""
        claimants: dict[int, list[int]] = {}
        for msg in replies:
            with suppress(Exception):  # a reply whose claim cannot be read claims nothing
                claimed = msg.content.metric_records[METRICS_KEY][PARTITION_ID]
                if isinstance(claimed, int) and not isinstance(claimed, bool):
                    claimants.setdefault(claimed, []).append(msg.metadata.src_node_id)
        return claimants

    def _longest_connected(self, nodes: Sequence[int]) -> int:
        return min(nodes, key=lambda n: (self.first_seen.get(n, float("inf")), n))

    def check(
        self,
        node: int,
        partition: int,
        claims: Mapping[int, Sequence[int]],
        connected: Collection[int],
    ) -> None:
        """ValueError when ``node`` may not reply for ``partition`` this round."""
        held = self.partition_of.get(node)
        if held is not None and held != partition:
            raise ValueError(f"partition-id {partition}, but this node is partition {held}")
        owner = self.owner_of.get(partition)
        if owner is not None and owner != node and owner in connected:
            raise ValueError(f"partition-id {partition} belongs to node {owner}")
        claimants = claims.get(partition, ())
        if owner is None and len(claimants) > 1:
            first = self._longest_connected(claimants)
            if first != node:
                raise ValueError(
                    f"partition-id {partition} is claimed by {len(claimants)} nodes this round "
                    f"and held by none; node {first}, connected longest, takes it"
                )

    def bind(self, node: int, partition: int) -> None:
        previous = self.owner_of.get(partition)
        if previous is not None and previous != node:
            self.partition_of.pop(previous, None)  # the old node is gone
        self.owner_of[partition] = node
        self.partition_of[node] = partition
