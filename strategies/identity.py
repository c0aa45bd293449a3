"""Which node speaks for which partition: bound on the first accepted reply.

A node cannot reply for a partition bound to another node that is still connected (was sent
this round's instruction). A restarted device comes back as a new node: it takes its partition
over once the old node is gone (no longer connected: the SuperLink drops a node silent for twice
its heartbeat interval, a minute at Flower's default). A partition nobody holds yet, claimed by
several nodes in one round, goes to none of them that round: the server cannot tell the device
from an impostor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from contextlib import suppress

from flwr.app import Message

from wire.keys import METRICS_KEY, PARTITION_ID


class Identities:
    def __init__(self) -> None:
        self.partition_of: dict[int, int] = {}  # node id -> partition id
        self.owner_of: dict[int, int] = {}  # partition id -> node id

    @staticmethod
    def claims(replies: Iterable[Message]) -> Counter[int]:
        """How many replies of a round claim each partition id (malformed claims left out)."""
        counts: Counter[int] = Counter()
        for msg in replies:
            with suppress(Exception):  # a reply whose claim cannot be read claims nothing
                claimed = msg.content.metric_records[METRICS_KEY][PARTITION_ID]
                if isinstance(claimed, int) and not isinstance(claimed, bool):
                    counts[claimed] += 1
        return counts

    def check(
        self, node: int, partition: int, claims: Counter[int], connected: Collection[int]
    ) -> None:
        """ValueError when ``node`` may not reply for ``partition`` this round."""
        held = self.partition_of.get(node)
        if held is not None and held != partition:
            raise ValueError(f"partition-id {partition}, but this node is partition {held}")
        owner = self.owner_of.get(partition)
        if owner is not None and owner != node and owner in connected:
            raise ValueError(f"partition-id {partition} belongs to node {owner}")
        if owner is None and claims[partition] > 1:
            raise ValueError(
                f"partition-id {partition} is claimed by {claims[partition]} nodes this round "
                "and held by none"
            )

    def bind(self, node: int, partition: int) -> None:
        previous = self.owner_of.get(partition)
        if previous is not None and previous != node:
            self.partition_of.pop(previous, None)  # the old node is gone
        self.owner_of[partition] = node
        self.partition_of[node] = partition
