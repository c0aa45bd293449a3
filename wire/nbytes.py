"""Bytes actually carried by a message: the size of its serialized content."""

from __future__ import annotations

from flwr.app import RecordDict
from flwr.common.serde import recorddict_to_proto


def content_nbytes(content: RecordDict) -> int:
    """Bytes of ``content`` as Flower serializes it for the wire (protobuf, no gRPC framing)."""
    return int(recorddict_to_proto(content).ByteSize())
