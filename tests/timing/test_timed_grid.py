"""TimedGrid: per-message push and pull times, a short poll, a timeout that keeps what came."""

import time
from collections.abc import Iterable

import pytest
from flwr.app import Message, RecordDict

from tests.helpers import reply_message
from timing.timed_grid import TimedGrid

pytestmark = pytest.mark.usefixtures("task_identity")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedGrid:
    """Replies to message i appear at pull number ``ready[i]`` (None: never)."""

    def __init__(self, ready: list[int | None], clock: FakeClock) -> None:
        self.ready, self.clock, self.pulls = ready, clock, 0
        self.pushed: list[Message] = []

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        self.pushed = list(messages)
        return [f"m{i}" for i in range(len(self.pushed))]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        self.clock.now += 1.0  # each pull sees the clock one second later
        out = []
        for message_id in message_ids:
            i = int(message_id[1:])
            if self.ready[i] is not None and self.ready[i] <= self.pulls:
                reply = reply_message(RecordDict(), src_node_id=10 + i)
                reply.metadata.__dict__["_reply_to_message_id"] = message_id
                out.append(reply)
        return out

    def get_node_ids(self) -> list[int]:
        return [10, 11, 12]


def _messages(n: int) -> list[Message]:
    return [
        Message(content=RecordDict(), dst_node_id=10 + i, message_type="train") for i in range(n)
    ]


def test_each_reply_gets_its_own_pull_time() -> None:
    clock = FakeClock()
    inner = ScriptedGrid([1, 3, 2], clock)
    grid = TimedGrid(inner, poll_s=1e-4, clock=clock)  # type: ignore[arg-type]
    replies = list(grid.send_and_receive(_messages(3), timeout=60))
    assert sorted(r.metadata.src_node_id for r in replies) == [10, 11, 12]
    trips = {r.metadata.src_node_id: grid.trip(r) for r in replies}
    assert all(t is not None and t.sent_at == 1000.0 for t in trips.values())
    assert {n: t.received_at for n, t in trips.items() if t} == {10: 1001.0, 11: 1003.0, 12: 1002.0}
    assert grid.destination(replies[0]) == replies[0].metadata.src_node_id
    assert grid.exchange_s == [3.0]  # push to the pull that saw the last reply
    assert grid.get_node_ids() == [10, 11, 12]
    grid.forget()
    assert grid.trip(replies[0]) is None and grid.exchange_s == []


def test_timeout_returns_the_replies_that_came() -> None:
    clock = FakeClock()
    inner = ScriptedGrid([1, None], clock)
    grid = TimedGrid(inner, poll_s=1e-3, clock=clock)  # type: ignore[arg-type]
    replies = list(grid.send_and_receive(_messages(2), timeout=0.05))
    assert [r.metadata.src_node_id for r in replies] == [10]
    assert inner.pulls >= 2  # it kept polling for the missing one until the timeout


def test_poll_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="poll interval"):
        TimedGrid(ScriptedGrid([], FakeClock()), poll_s=0)  # type: ignore[arg-type]


def test_waits_start_short_and_double_up_to_the_poll_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []
    monkeypatch.setattr("timing.timed_grid.time.sleep", waits.append)
    inner = ScriptedGrid([9], FakeClock())
    grid = TimedGrid(inner, poll_s=0.1, clock=inner.clock)  # type: ignore[arg-type]
    assert len(list(grid.send_and_receive(_messages(1), timeout=60))) == 1
    assert waits == pytest.approx([0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.1, 0.1])


class SlowFirstPullGrid:
    """Two messages: the first pull takes ``pull_s`` (a reply's late objects being waited
    for) and returns nothing; the second message's reply is there from then on."""

    def __init__(self, pull_s: float) -> None:
        self.pull_s, self.pulls = pull_s, 0

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        return [f"m{i}" for i, _ in enumerate(messages)]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        if self.pulls == 1:
            time.sleep(self.pull_s)
            return []
        reply = reply_message(RecordDict(), src_node_id=11)
        reply.metadata.__dict__["_reply_to_message_id"] = "m1"
        return [reply] if "m1" in message_ids else []


def test_a_pull_that_outlasts_the_deadline_is_followed_by_one_more() -> None:
    """Replies that came while a pull waited past the deadline are kept, not lost."""
    inner = SlowFirstPullGrid(pull_s=0.3)
    grid = TimedGrid(inner, poll_s=1e-3)  # type: ignore[arg-type]
    replies = list(grid.send_and_receive(_messages(2), timeout=0.1))
    assert [r.metadata.src_node_id for r in replies] == [11]
    assert inner.pulls == 2  # and no more: the second pull began past the deadline
