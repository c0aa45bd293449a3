"""The queries outside a round's training: identify (which partition a node is) and
save-state / restore-state (``StateRequest``), with the nodes' answers; the parsers raise
``ValueError`` naming what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

from flwr.app import ConfigRecord, MetricRecord, RecordDict

from wire.fields import config_record, flag, integer, metric_record, text, within
from wire.keys import CONFIG_KEY, METRICS_KEY, PARTITION_ID, RESTORED, SERVER_ROUND, STATE_DIR


def identity_content(partition_id: int) -> RecordDict:
    """A node's answer to an identify query: its partition id."""
    return RecordDict({METRICS_KEY: MetricRecord({PARTITION_ID: partition_id})})


def parse_identity(content: RecordDict, num_clients: int) -> int:
    """The partition id of an identify reply; ValueError naming what is wrong."""
    metrics = metric_record(content, METRICS_KEY)
    return within(PARTITION_ID, integer(metrics, PARTITION_ID), 0, num_clients - 1)


@dataclass(frozen=True)
class StateRequest:
    """A save-state or restore-state query: the checkpoint's round and its clients' directory."""

    server_round: int
    directory: str

    def to_content(self) -> RecordDict:
        config = ConfigRecord({SERVER_ROUND: self.server_round, STATE_DIR: self.directory})
        return RecordDict({CONFIG_KEY: config})

    @classmethod
    def parse(cls, content: RecordDict) -> StateRequest:
        config = config_record(content, CONFIG_KEY)
        directory = text(config, STATE_DIR, what="a directory")
        return cls(integer(config, SERVER_ROUND), directory)


def state_reply(partition_id: int, restored: bool) -> RecordDict:
    """A node's answer to a state query: its partition id, and (restore) whether it took its
    saved state."""
    metrics = MetricRecord({PARTITION_ID: partition_id, RESTORED: int(restored)})
    return RecordDict({METRICS_KEY: metrics})


def parse_state_reply(content: RecordDict, num_clients: int) -> tuple[int, bool]:
    """(partition id, restored) of a state reply; ValueError naming what is wrong."""
    partition_id = parse_identity(content, num_clients)
    return partition_id, flag(content.metric_records[METRICS_KEY], RESTORED)
