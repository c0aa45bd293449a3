"""Replicas of the global model at the clients (compressed collectives), as the server sees them.

Every client keeps a replica and its version in ``context.state``. A client whose replica is at
the previous version gets only the last aggregated update (``delta``); one at the current
version gets no model (``current``); one at an older version (it sat rounds out: client
sampling) gets a ``patch``, the model's values wherever it changed since that version, when
that is smaller than the model; a new or stale client (its reply failed or was refused) gets
the ``full`` model. Versions count aggregated rounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord
from numpy.typing import NDArray

from collectives.base import CompactUpdate, DenseUpdate, Update
from compress.low_rank import Factored
from state.archive import StateError
from state.fields import Fields, int_keys
from wire.codec import Sparse, index_nbytes, raw_array, read_raw
from wire.fields import is_integer
from wire.keys import CURRENT, DELTA, FULL, PATCH
from wire.train_instruction import ReplicaPayload, Vector


def patch_nbytes(count: int, size: int) -> int:
    """Bytes of a patch of ``count`` float32 values (indices or bitmask, the smaller)."""
    return 4 * count + index_nbytes(count, size)


class Replicas:
    def __init__(self) -> None:
        self.version = 0  # aggregated rounds applied to the global model
        self.last_delta: Sparse | None = None  # what took version − 1 to version
        self.last_compact: CompactUpdate | None = None  # the same, smaller (when there is one)
        self._holds: dict[int, int] = {}  # node id → version of its replica (when known)
        # Per coordinate, the version whose update last touched it (patches read it).
        self._changed_in: NDArray[np.int64] | None = None

    def kind_for(self, node_id: int) -> str:
        held = self._holds.get(node_id)
        if held == self.version:
            return CURRENT
        if held == self.version - 1 and self.last_delta is not None:
            return DELTA
        if held is not None and self._changed_in is not None:
            return PATCH
        return FULL

    def payloads(self, node_ids: Iterable[int], model: Vector) -> dict[int, ReplicaPayload]:
        """One payload per node; nodes of the same kind (and patch base) share one object."""
        shared = {
            FULL: ReplicaPayload(FULL, self.version, full=model),
            CURRENT: ReplicaPayload(CURRENT, self.version),
        }
        patches: dict[int, ReplicaPayload] = {}
        out = {}
        for node in sorted(node_ids):
            kind = self.kind_for(node)
            if kind == DELTA and DELTA not in shared:  # encoded once, and only when sent
                compact = None if self.last_compact is None else self.last_compact.to_record()
                shared[DELTA] = ReplicaPayload(
                    DELTA, self.version, delta=self.last_delta, compact=compact
                )
            if kind == PATCH:
                base = self._holds[node]
                if base not in patches:
                    patches[base] = self._patch(base, model) or shared[FULL]
                out[node] = patches[base]
            else:
                out[node] = shared[kind]
        return out

    def _patch(self, base: int, model: Vector) -> ReplicaPayload | None:
        """The model's values wherever an update touched it after ``base``; None when the
        full model is no larger."""
        assert self._changed_in is not None
        indices = np.flatnonzero(self._changed_in > base)
        if patch_nbytes(indices.size, model.size) >= 4 * model.size:
            return None
        values = np.ascontiguousarray(model[indices], dtype=np.float32)
        patch = Sparse(indices=indices, values=values, size=int(model.size))
        return ReplicaPayload(PATCH, self.version, patch=patch, base=base)

    STATE_SCHEMA = 1

    def state_dict(self) -> dict[str, object]:
        """Versions, who holds which, the last delta (and its compact form, as the clients
        read it), and where each coordinate last changed."""
        delta, compact = self.last_delta, self.last_compact
        return {
            "schema": self.STATE_SCHEMA,
            "version": self.version,
            "holds": int_keys(self._holds),
            "delta_indices": None if delta is None else delta.indices,
            "delta_values": None if delta is None else delta.values,
            "compact": None if compact is None else _raw_arrays(compact.to_record()),
            "changed_in": self._changed_in,
        }

    def load_state_dict(self, state: object, size: int) -> None:
        """``size``: the model's length, which every vector here has."""
        fields = Fields("replicas", state, self.STATE_SCHEMA)
        self.version = fields.integer("version", least=0)
        self._holds = fields.int_map("holds", lambda v: _version(v, self.version))
        indices = fields.optional_indices("delta_indices", size)
        values = fields.optional_array("delta_values", "float32")
        self.last_delta = _sparse(indices, values, size)
        compact = fields.raw("compact")
        self.last_compact = None if compact is None else _compact(compact, size)
        self._changed_in = fields.optional_array("changed_in", "int64", (size,))
        fields.done()

    @staticmethod
    def counts(payloads: dict[int, ReplicaPayload]) -> dict[str, int]:
        """Nodes per payload kind, for the record."""
        return dict(sorted(Counter(p.kind for p in payloads.values()).items()))

    def take_over(self, old: int, new: int) -> None:
        """Node ``new`` holds what node ``old`` held (a restored state)."""
        if old in self._holds:
            self._holds[new] = self._holds.pop(old)

    def forget_holders(self, but: Collection[int] = ()) -> None:
        """No node's replica but those of ``but`` is known any more (their state was lost)."""
        self._holds = {node: held for node, held in self._holds.items() if node in but}

    def advance(
        self,
        sent_to: Iterable[int],
        applied: Update | None,
        held: Iterable[int],
        compact: CompactUpdate | None = None,
    ) -> None:
        """After a round: ``applied`` (if any) is the new version's delta, which travels as
        ``compact`` when that decodes to it bit for bit (a server optimizer's step or a
        statistics policy may have changed it); the nodes in ``held`` trained on the version
        they were sent; every other node is unknown. A step that is no ``Sparse`` (outside
        the replica contract: collectives/base.py) makes a version no delta or
        patch reaches: every replica gets the full model next."""
        sent_version = self.version
        for node in sent_to:
            self._holds.pop(node, None)
        if isinstance(applied, DenseUpdate):
            self.version += 1
            self.last_delta, self.last_compact, self._changed_in = None, None, None
        elif applied is not None:
            self.last_delta = applied
            self.last_compact = None
            if compact is not None and _same(compact.to_sparse(), applied):
                self.last_compact = compact
            self.version += 1
            if self._changed_in is None:
                self._changed_in = np.zeros(applied.size, dtype=np.int64)
            self._changed_in[applied.indices] = self.version
        for node in held:
            self._holds[node] = sent_version


def _same(a: Sparse, b: Sparse) -> bool:
    return (
        a.size == b.size
        and np.array_equal(a.indices, b.indices)
        and np.array_equal(a.values.view(np.uint32), b.values.view(np.uint32))
    )


def _version(value: object, current: int) -> int:
    if not is_integer(value) or not 0 <= value <= current:
        raise ValueError(f"{value!r} is not a version up to {current}")
    return value


def _sparse(
    indices: NDArray[np.int64] | None, values: NDArray[np.float32] | None, size: int
) -> Sparse | None:
    """The last delta, checked: both arrays or neither (the indices checked as read), one
    finite value each."""
    if indices is None or values is None:
        if indices is not None or values is not None:
            raise StateError("replicas: delta_indices and delta_values come together")
        return None
    if values.shape != indices.shape:
        raise StateError("replicas: delta_values is not one value per index")
    if not np.all(np.isfinite(values)):
        raise StateError("replicas: the delta's values are not finite")
    return Sparse(indices, values, size)


def _raw_arrays(record: ArrayRecord) -> dict[str, NDArray[Any]]:
    """A compact update's record (raw 1-D arrays, wire/codec.py) as arrays."""
    return {name: read_raw(record, name, array.dtype) for name, array in record.items()}


def _compact(state: object, size: int) -> CompactUpdate:
    """A compact delta as the clients read it (client/replica.py): PowerSGD's factors."""
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise StateError("replicas: compact is not a mapping of arrays")
    record = ArrayRecord({name: raw_array(array) for name, array in state.items()})
    try:
        return Factored.from_record(record, size)
    except ValueError as exc:
        raise StateError(f"replicas: compact: {exc}") from None
