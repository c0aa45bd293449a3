"""A message's whole content as one Flower object, so that it travels in few requests.

Flower 1.42 sends a message as a tree of objects (the Message, its RecordDict, one object per
record, per array and per array chunk) and the SuperLink serves one request per object each
way: a reply of 8 objects costs 2 x 8 + 3 requests between node and ServerApp. ``pack`` puts a
content of up to ``PACK_LIMIT`` bytes into one ConfigRecord holding the content's protobuf
(Flower's own serialization, ``recorddict_to_proto``): 3 objects per message. Larger contents
travel as they are, so Flower's chunking of large arrays still applies.

``unpack`` takes either form. A packed content is data, never code (protobuf, no pickle), and
is checked for being a well-formed RecordDict of at most ``PACK_LIMIT`` bytes, ``MAX_RECORDS``
records and ``MAX_ENTRIES`` entries (arrays, metrics, config values) before Flower builds its
objects (a few MiB of tiny records would otherwise cost seconds of the ServerApp's CPU): what
is in it goes on to the same parsing and checks as an unpacked content.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict  # type: ignore[attr-defined]
from google.protobuf.message import DecodeError

from wire.codec import PayloadError
from wire.keys import PACKED_KEY

# Below Flower's array chunk (FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE, 5 MiB): a content that fits
# is one object; a larger one is left to Flower's chunks.
PACK_LIMIT = 4 * 2**20
PACKED_VALUE = "recorddict"  # the one entry of the packed ConfigRecord
# Far above any message of ours (a handful of records, tens of entries).
MAX_RECORDS, MAX_ENTRIES = 64, 4096


def pack(content: RecordDict) -> RecordDict:
    """``content`` as one ConfigRecord, or as it is when it is larger than ``PACK_LIMIT``
    (or already packed)."""
    if is_packed(content):
        return content
    proto = recorddict_to_proto(content)
    if proto.ByteSize() > PACK_LIMIT:
        return content
    return RecordDict({PACKED_KEY: ConfigRecord({PACKED_VALUE: proto.SerializeToString()})})


def is_packed(content: RecordDict) -> bool:
    return PACKED_KEY in content.config_records


def unpack(content: RecordDict) -> RecordDict:
    """The content ``pack`` was given. ``PayloadError`` names what is wrong with a packed
    content that is not one RecordDict of at most ``PACK_LIMIT`` bytes."""
    if not is_packed(content):
        return content
    if len(content) != 1:
        raise PayloadError(f"a packed content has one record, got {sorted(content)}")
    record = content.config_records[PACKED_KEY]
    blob = record.get(PACKED_VALUE)
    if len(record) != 1 or not isinstance(blob, bytes):
        raise PayloadError(f"a packed record holds bytes under {PACKED_VALUE!r} only")
    if len(blob) > PACK_LIMIT:
        raise PayloadError(f"a packed content is at most {PACK_LIMIT} bytes, got {len(blob)}")
    try:
        proto = ProtoRecordDict.FromString(blob)
    except DecodeError as exc:
        raise PayloadError(f"a packed content is not a RecordDict: {exc}") from exc
    records = len(proto.items)
    entries = 0
    for item in proto.items:
        kind = item.WhichOneof("value")  # None: an item of no record type, refused below
        entries += 0 if kind is None else len(getattr(item, kind).items)
    if records > MAX_RECORDS or entries > MAX_ENTRIES:
        raise PayloadError(
            f"a packed content has at most {MAX_RECORDS} records and {MAX_ENTRIES} entries, "
            f"got {records} and {entries}"
        )
    try:
        unpacked = recorddict_from_proto(proto)
    except (ValueError, TypeError) as exc:
        raise PayloadError(f"a packed content is not a RecordDict: {exc}") from exc
    if is_packed(unpacked):
        raise PayloadError("a packed content holds another packed content")
    return unpacked
