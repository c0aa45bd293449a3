"""Replicas of the global model at the clients (compressed collectives), as the server sees them.

Every client keeps a replica and its version in ``context.state``. A client whose replica is at
the previous version gets only the last aggregated update (``delta``); one at the current
version gets no model (``current``); a new or stale client (its reply failed or was refused)
gets the ``full`` model. Versions count aggregated rounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from wire.codec import Sparse
from wire.keys import CURRENT, DELTA, FULL
from wire.messages import ReplicaPayload, Vector


class Replicas:
    def __init__(self) -> None:
        self.version = 0  # aggregated rounds applied to the global model
        self.last_delta: Sparse | None = None  # what took version − 1 to version
        self._holds: dict[int, int] = {}  # node id → version of its replica (when known)

    def kind_for(self, node_id: int) -> str:
        held = self._holds.get(node_id)
        if held == self.version:
            return CURRENT
        if held == self.version - 1 and self.last_delta is not None:
            return DELTA
        return FULL

    def payloads(self, node_ids: Iterable[int], model: Vector) -> dict[int, ReplicaPayload]:
        """One payload per node; nodes of the same kind share one object."""
        shared = {
            FULL: ReplicaPayload(FULL, self.version, full=model),
            DELTA: ReplicaPayload(DELTA, self.version, delta=self.last_delta),
            CURRENT: ReplicaPayload(CURRENT, self.version),
        }
        return {node: shared[self.kind_for(node)] for node in sorted(node_ids)}

    @staticmethod
    def counts(payloads: dict[int, ReplicaPayload]) -> dict[str, int]:
        """Nodes per payload kind, for the record."""
        return dict(sorted(Counter(p.kind for p in payloads.values()).items()))

    def forget_holders(self) -> None:
        """No node's replica is known any more (the clients' state was lost)."""
        self._holds.clear()

    def advance(self, sent_to: Iterable[int], applied: Sparse | None, held: Iterable[int]) -> None:
        """After a round: ``applied`` (if any) is the new version's delta; the nodes in
        ``held`` trained on the version they were sent; every other node is unknown."""
        sent_version = self.version
        for node in sent_to:
            self._holds.pop(node, None)
        if applied is not None:
            self.last_delta = applied
            self.version += 1
        for node in held:
            self._holds[node] = sent_version
