"""PackedGrid and the ClientApp's packed_content mod: both ends of packed messages."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from client.mods import packed_content
from server.packed_grid import PackedGrid
from wire.keys import PACKED_KEY
from wire.packing import PACKED_VALUE, is_packed, pack

pytestmark = pytest.mark.usefixtures("task_identity")


def _content() -> RecordDict:
    return RecordDict(
        {
            "arrays": ArrayRecord({"values": Array(np.ones(4, dtype=np.float32))}),
            "config": ConfigRecord({"server-round": 2}),
        }
    )


class ScriptedGrid:
    """Keeps what is pushed; answers pulls with ``replies``."""

    def __init__(self, replies: list[Message]) -> None:
        self.pushed: list[Message] = []
        self.replies = replies

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        self.pushed += list(messages)
        return [f"m{i}" for i, _ in enumerate(self.pushed)]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return self.replies


def _reply(content: RecordDict) -> Message:
    return Message(content, dst_node_id=0, message_type="train")


def test_the_grid_pushes_packed_copies_and_unpacks_replies() -> None:
    sent = Message(_content(), dst_node_id=7, message_type="train", group_id="2")
    inner = ScriptedGrid([_reply(pack(_content())), _reply(_content())])
    grid = PackedGrid(inner)  # type: ignore[arg-type]
    assert grid.push_messages([sent]) == ["m0"]
    (pushed,) = inner.pushed
    assert is_packed(pushed.content) and not is_packed(sent.content)  # the caller's is untouched
    assert (pushed.metadata.dst_node_id, pushed.metadata.message_type) == (7, "train")
    assert pushed.metadata.group_id == "2"
    packed_reply, plain_reply = grid.pull_messages(["m0", "m1"])
    for reply in (packed_reply, plain_reply):  # a large reply comes unpacked: both are read
        assert sorted(reply.content) == ["arrays", "config"]
        np.testing.assert_array_equal(reply.content["arrays"]["values"].numpy(), np.ones(4))


def test_a_malformed_packed_reply_becomes_an_error_reply_that_names_it() -> None:
    garbage = RecordDict({PACKED_KEY: ConfigRecord({PACKED_VALUE: b"\xff\xff\xff"})})
    grid = PackedGrid(ScriptedGrid([_reply(garbage)]))  # type: ignore[arg-type]
    (reply,) = grid.pull_messages(["m0"])
    assert reply.has_error() and not reply.has_content()
    assert "packed content refused: a packed content is not a RecordDict" in reply.error.reason


def _context() -> Context:
    return Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})


def test_the_mod_unpacks_a_packed_instruction_and_packs_its_reply() -> None:
    seen: list[RecordDict] = []

    def handler(msg: Message, context: Context) -> Message:
        seen.append(msg.content)
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 3})}), reply_to=msg)

    instruction = Message(pack(_content()), dst_node_id=1, message_type="train")
    reply = packed_content(instruction, _context(), handler)
    assert sorted(seen[0]) == ["arrays", "config"]
    assert is_packed(reply.content)
    # An instruction that came unpacked (a simulation, or a large model) gets a plain reply.
    plain = packed_content(
        Message(_content(), dst_node_id=1, message_type="train"), _context(), handler
    )
    assert not is_packed(plain.content) and "metrics" in plain.content
