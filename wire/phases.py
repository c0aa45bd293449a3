"""The exchanges of a round after its training step: Allreduce's leader phases and
PowerSGD's q phase each send a ``PhaseRequest`` and read ``PhaseReply``s; a client's collective
reads the index set and counts of its instruction or request here too. The parsers raise
``ValueError`` (``PayloadError`` for arrays) naming what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from numpy.typing import NDArray

from wire.codec import PayloadError, array_record, decode_indices, indices_record
from wire.fields import config_record, integer, number, within
from wire.keys import (
    COMPRESS_S,
    COMPRESSION_RATIO,
    CONFIG_KEY,
    INDEX_SET_KEY,
    MEASURED_METRICS,
    METRICS_KEY,
    SERVER_ROUND,
    SPARSE_KEY,
)
from wire.train_reply import only_known

Indices = NDArray[np.int64]


def count_in(content: RecordDict, key: str, most: int) -> int:
    """An instruction's count ``key`` in 0..``most`` (0 when absent)."""
    config = config_record(content, CONFIG_KEY)
    if key not in config:
        return 0
    return within(key, integer(config, key), 0, most)


def index_set_of(content: RecordDict, size: int) -> Indices | None:
    """The shared index set an instruction or value request carries, if any."""
    if INDEX_SET_KEY not in content.array_records:
        return None
    return decode_indices(content.array_records[INDEX_SET_KEY], size)


@dataclass(frozen=True)
class PhaseRequest:
    """An Allreduce leader-phase request: the leader's indices, or everyone's values at I."""

    server_round: int
    ratio: float
    index_set: Indices | None = None  # values phase only
    size: int = 0

    def to_content(self) -> RecordDict:
        config = ConfigRecord({SERVER_ROUND: self.server_round, COMPRESSION_RATIO: self.ratio})
        content = RecordDict({CONFIG_KEY: config})
        if self.index_set is not None:
            content[INDEX_SET_KEY] = indices_record(self.index_set, self.size)
        return content

    @classmethod
    def parse(cls, content: RecordDict) -> PhaseRequest:
        config = config_record(content, CONFIG_KEY)
        return cls(integer(config, SERVER_ROUND), number(config, COMPRESSION_RATIO))


@dataclass(frozen=True)
class PhaseReply:
    """A reply to a leader-phase request: indices (leader) or values at I, and compress-s."""

    sparse: ArrayRecord
    compress_s: float

    def to_content(self) -> RecordDict:
        return RecordDict(
            {SPARSE_KEY: self.sparse, METRICS_KEY: MetricRecord({COMPRESS_S: self.compress_s})}
        )

    @staticmethod
    def sparse_of(content: RecordDict) -> ArrayRecord:
        only_known(content, frozenset({SPARSE_KEY}), frozenset({COMPRESS_S, *MEASURED_METRICS}))
        return array_record(content, SPARSE_KEY)


def required_sparse(record: ArrayRecord | None) -> ArrayRecord:
    """A reply's compressed payload; PayloadError when it has none."""
    if record is None:
        raise PayloadError(f"ArrayRecord {SPARSE_KEY!r} is missing")
    return record
