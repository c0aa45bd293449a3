"""A Grid that hands every call to the Grid it wraps: the base of the ServerApp's grid layers
(``server.packed_grid.PackedGrid``, ``timing.timed_grid.TimedGrid``), each of which overrides
only what it changes."""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.proto.node_pb2 import NodeInfo  # type: ignore[attr-defined]
from flwr.serverapp import Grid
from flwr.supercore.run import Run


class WrappedGrid(Grid):
    def __init__(self, inner: Grid) -> None:
        self._inner = inner

    def set_run(self, run: Run) -> None:
        self._inner.set_run(run)

    @property
    def run(self) -> Run:
        return self._inner.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self._inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self._inner.get_node_ids()

    def get_nodes(self) -> Iterable[NodeInfo]:
        return self._inner.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self._inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self._inner.pull_messages(message_ids)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self._inner.send_and_receive(messages, timeout=timeout)
