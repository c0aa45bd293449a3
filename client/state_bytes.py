"""A node's ``context.state`` as bytes on disk: Flower's own protobuf of a RecordDict (data,
never code), written so that a kill or a power cut at any point leaves the old file or the
new one. The edge agent keeps a device's state this way (``client/device_state.py``), and in
simulation every client writes its state at a checkpoint (``client/saved_state.py``)."""

from __future__ import annotations

import os
from pathlib import Path

from flwr.app import RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict  # type: ignore[attr-defined]
from google.protobuf.message import DecodeError


def state_to_bytes(state: RecordDict) -> bytes:
    return bytes(recorddict_to_proto(state).SerializeToString())


def state_from_bytes(data: bytes) -> RecordDict:
    """The state ``data`` holds; ValueError when it is not one."""
    try:
        return recorddict_from_proto(ProtoRecordDict.FromString(data))
    except (DecodeError, ValueError, TypeError) as exc:
        raise ValueError(f"not a node's state: {exc}") from None


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) so that a kill or a power cut at any point
    leaves either the old file or the new one: a synced temporary file, renamed."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)  # created anew, never through a link left in its place
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(partial, flags, 0o600), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    partial.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself
    finally:
        os.close(directory)
