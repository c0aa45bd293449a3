"""A Grid that sends each message's content packed into one object and unpacks every reply
(``wire.packing``): a deployment round costs 3 objects per message instead of one per record
and array. The ClientApp's ``packed_content`` mod does the same on the node's side, packing a
reply when its instruction came packed.

A reply whose packed content is malformed becomes an error reply naming what is wrong, so the
strategy refuses it as it refuses any error reply.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Error, Message
from flwr.common.constant import ErrorCode

from common.wrapped_grid import WrappedGrid
from wire.codec import PayloadError, clip
from wire.packing import pack, unpack


class PackedGrid(WrappedGrid):
    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push a packed copy of each message (the caller's messages are left as they are)."""
        return self._inner.push_messages([self._packed(message) for message in messages])

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [unpacked(reply) for reply in self._inner.pull_messages(message_ids)]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies = self._inner.send_and_receive(
            [self._packed(message) for message in messages], timeout=timeout
        )
        return [unpacked(reply) for reply in replies]

    def _packed(self, message: Message) -> Message:
        metadata = message.metadata
        return Message(
            pack(message.content),
            metadata.dst_node_id,
            metadata.message_type,
            ttl=metadata.ttl,
            group_id=metadata.group_id,
        )


def unpacked(reply: Message) -> Message:
    """``reply`` with its content unpacked in place, or turned into an error reply that says
    why it could not be."""
    if not reply.has_content():
        return reply
    try:
        reply.content = unpack(reply.content)
    except PayloadError as exc:
        # Flower has no call that swaps a content for an error: a reply is either.
        reply.__dict__["_content"] = None
        reply.error = Error(
            code=ErrorCode.UNKNOWN, reason=clip(f"packed content refused: {exc}", 500)
        )
    return reply
