"""Packing a content into one object: what travels, what comes back, what is refused."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from wire.codec import PayloadError
from wire.keys import PACKED_KEY
from wire.packing import PACK_LIMIT, PACKED_VALUE, is_packed, pack, unpack

pytestmark = pytest.mark.usefixtures("task_identity")


def _content(size: int = 100) -> RecordDict:
    return RecordDict(
        {
            "sparse": ArrayRecord(
                {
                    "values": Array(np.arange(size, dtype=np.float32)),
                    "indices": Array(np.arange(size, dtype=np.int32)),
                }
            ),
            "metrics": MetricRecord({"num-examples": 12, "train-loss": 0.5, "gains": [0.1, 0.2]}),
            "config": ConfigRecord({"collective": "allgather", "server-round": 3}),
        }
    )


def _objects(content: RecordDict) -> int:
    return len(get_all_nested_objects(Message(content, dst_node_id=1, message_type="train")))


def test_a_packed_content_is_three_objects_and_unpacks_to_the_same_content() -> None:
    content = _content()
    assert _objects(content) >= 8  # Message, RecordDict, 3 records, 2 arrays and their chunks
    packed = pack(content)
    assert is_packed(packed) and _objects(packed) == 3
    back = unpack(packed)
    assert sorted(back) == sorted(content)
    for name in ("values", "indices"):
        np.testing.assert_array_equal(
            back.array_records["sparse"][name].numpy(),
            content.array_records["sparse"][name].numpy(),
        )
    assert dict(back.metric_records["metrics"]) == dict(content.metric_records["metrics"])
    assert dict(back.config_records["config"]) == dict(content.config_records["config"])
    assert pack(packed) is packed  # packing twice is packing once


def test_a_content_over_the_limit_travels_as_it_is_and_passes_unpack() -> None:
    big = _content(size=PACK_LIMIT // 8 + 1)  # two arrays of 4 bytes per value: over 4 MiB
    assert pack(big) is big
    assert unpack(big) is big


def _packed(value: object, **extra: object) -> RecordDict:
    return RecordDict({PACKED_KEY: ConfigRecord({PACKED_VALUE: value, **extra})})  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("content", "refusal"),
    [
        (_packed("not bytes"), "holds bytes under 'recorddict' only"),
        (_packed(b"x", extra=1), "holds bytes under 'recorddict' only"),
        (_packed(b"\xff\xff\xff\xff"), "is not a RecordDict"),
        (_packed(b"\x00" * (PACK_LIMIT + 1)), f"at most {PACK_LIMIT} bytes"),
        (_packed(pack(_content()).config_records[PACKED_KEY][PACKED_VALUE]), None),
    ],
)
def test_a_malformed_packed_content_is_refused_by_name(
    content: RecordDict, refusal: str | None
) -> None:
    if refusal is None:  # a well-formed one, for contrast
        assert "sparse" in unpack(content)
        return
    with pytest.raises(PayloadError, match=refusal):
        unpack(content)


def test_a_packed_content_beside_other_records_or_inside_another_is_refused() -> None:
    packed = pack(_content())
    beside = RecordDict({**packed, "metrics": MetricRecord({"x": 1})})
    with pytest.raises(PayloadError, match="has one record"):
        unpack(beside)
    from flwr.common.serde import recorddict_to_proto

    nested = _packed(recorddict_to_proto(packed).SerializeToString())
    with pytest.raises(PayloadError, match="holds another packed content"):
        unpack(nested)


def test_a_packed_content_of_too_many_records_or_entries_is_refused_before_it_is_built() -> None:
    from flwr.common.serde import recorddict_to_proto

    from wire.packing import MAX_ENTRIES, MAX_RECORDS

    many_records = RecordDict({f"r{i}": ConfigRecord() for i in range(MAX_RECORDS + 1)})
    many_entries = RecordDict({"m": MetricRecord({f"k{i}": i for i in range(MAX_ENTRIES + 1)})})
    for content, counts in (
        (many_records, f"got {MAX_RECORDS + 1} and 0"),
        (many_entries, f"got 1 and {MAX_ENTRIES + 1}"),
    ):
        blob = recorddict_to_proto(content).SerializeToString()
        with pytest.raises(PayloadError, match=counts):
            unpack(_packed(blob))
