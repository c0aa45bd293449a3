"""Wake-ups through a real mosquitto on loopback: a node is woken when its message is pushed,
and the ServerApp's grid pulls when a node says it replied, not every few milliseconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

import pytest
from flwr.app import Message, RecordDict

from common.wake_ups import FALLBACK_POLL_S, WakeUps, node_topic, run_topic
from tests.helpers import reply_message
from timing.timed_grid import TimedGrid
from wire.stream_samples import BrokerAddress

pytestmark = pytest.mark.usefixtures("task_identity")

CONNECT_S = 5.0


@pytest.fixture
def wake_ups(mqtt_broker: BrokerAddress) -> Iterator[list[WakeUps]]:
    made: list[WakeUps] = []
    yield made
    for one in made:
        one.close()


def _listening(made: list[WakeUps], broker: BrokerAddress, topic: str | None) -> WakeUps:
    one = WakeUps(broker)
    made.append(one)
    if topic is not None:
        one.listen(topic)
    assert one.wait(CONNECT_S), "no connection to the broker"  # set on every connect
    one.woken.clear()
    return one


def _subscribed(listener: WakeUps, waker: WakeUps, topic: str) -> None:
    """Until the subscription is in place: wake it until it is woken."""
    deadline = time.monotonic() + CONNECT_S
    while not listener.wait(0.05):
        assert time.monotonic() < deadline, "the subscription never took"
        waker.wake(topic)
    listener.woken.clear()
    while listener.wait(0.2):  # a wake-up sent before the first arrived may still be on its way
        listener.woken.clear()


def test_a_wake_up_reaches_its_topic_only(
    mqtt_broker: BrokerAddress, wake_ups: list[WakeUps]
) -> None:
    node = _listening(wake_ups, mqtt_broker, node_topic(5))
    other = _listening(wake_ups, mqtt_broker, node_topic(6))
    server = _listening(wake_ups, mqtt_broker, None)
    _subscribed(node, server, node_topic(5))
    _subscribed(other, server, node_topic(6))
    server.wake(node_topic(5))
    assert node.wait(CONNECT_S)
    assert not other.wait(0.3)


class LateGrid:
    """One message; its reply is there ``delay_s`` after the push, and then the node wakes
    the run's topic. Counts the pulls."""

    def __init__(self, node: WakeUps, delay_s: float) -> None:
        self.node, self.delay_s, self.pulls = node, delay_s, 0
        self.ready = threading.Event()

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        def answer() -> None:
            time.sleep(self.delay_s)
            self.ready.set()
            self.node.wake(run_topic(1))

        threading.Thread(target=answer, daemon=True).start()
        return ["m0" for _ in messages]

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        if not self.ready.is_set():
            return []
        reply = reply_message(RecordDict(), src_node_id=10)
        reply.metadata.__dict__["_reply_to_message_id"] = "m0"
        return [reply]


def test_the_grid_wakes_the_node_and_pulls_when_woken(
    mqtt_broker: BrokerAddress, wake_ups: list[WakeUps]
) -> None:
    server = _listening(wake_ups, mqtt_broker, run_topic(1))
    node = _listening(wake_ups, mqtt_broker, node_topic(10))
    _subscribed(server, node, run_topic(1))
    _subscribed(node, server, node_topic(10))
    inner = LateGrid(node, delay_s=0.4)
    grid = TimedGrid(inner, poll_s=0.01, wake_ups=server)  # type: ignore[arg-type]
    began = time.monotonic()
    message = Message(content=RecordDict(), dst_node_id=10, message_type="train")
    (reply,) = grid.send_and_receive([message], timeout=10)
    took = time.monotonic() - began
    assert node.wait(0)  # the push woke the node's topic
    assert reply.metadata.src_node_id == 10
    assert took < FALLBACK_POLL_S  # woken, not found by the fallback poll
    # Without wake-ups a 10-ms poll pulls about 40 times in 0.4 s; woken, twice or so.
    assert inner.pulls <= 3, inner.pulls
