"""Wake-ups over MQTT: a waiting process polls Flower when there is something to fetch.

Flower 1.42 has no push: a SuperNode asks the SuperLink for messages, and a ServerApp asks it
for replies, in loops. Short loops cost the SuperLink a request per poll per process; long ones
cost the round their length. With a broker both sides already reach, each side tells the other
when it has put something on the SuperLink: the ServerApp, after it pushed a node's message,
publishes to that node's topic; a node, after it pushed its reply, publishes to the run's
topic. The waiting side then polls at once, and otherwise every ``fallback`` seconds, so a lost
wake-up costs that, not a round.

A wake-up carries nothing (QoS 0, an empty payload): it is a hint to poll, never data. A
waiting side polls at most once per ``MIN_POLL_GAP_S`` however many come, so a flood of
forged ones costs the SuperLink at most 50 polls a second per listener, not a busy loop.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import paho.mqtt.client as mqtt

from wire.stream_samples import BrokerAddress, BrokerAuth

log = logging.getLogger("edgeflex.wake")

WAKE_PREFIX = "edgeflex/wake"
FALLBACK_POLL_S = 1.0  # how often a waiting side polls when no wake-up comes
MIN_POLL_GAP_S = 0.02  # the shortest time between two polls that wake-ups bring


def node_topic(node_id: int) -> str:
    """Where the ServerApp wakes node ``node_id`` (Flower's node id)."""
    return f"{WAKE_PREFIX}/node-{node_id}"


def run_topic(run_id: int) -> str:
    """Where the nodes wake the ServerApp of run ``run_id``."""
    return f"{WAKE_PREFIX}/run-{run_id}"


class WakeUps:
    """One MQTT connection that listens on one topic and can wake any other.

    ``woken`` is set by every wake-up on the listened topic. A waiting loop clears it *before*
    it polls, so a wake-up that comes during the poll makes the next wait return at once."""

    def __init__(self, broker: BrokerAddress, auth: BrokerAuth | None = None) -> None:
        self.broker = broker
        self.woken = threading.Event()
        self._topic: str | None = None
        self._last_return = 0.0
        self._client = mqtt.Client(
            callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
            client_id=f"edgeflex-wake-{uuid.uuid4().hex[:12]}",
            clean_session=True,  # a missed wake-up is not worth keeping
        )
        (auth or BrokerAuth()).apply(self._client)
        self._client.on_connect = self._on_connect
        self._client.on_message = lambda c, userdata, message: self.woken.set()
        self._client.connect_async(broker.host, broker.port)
        self._client.loop_start()

    def _on_connect(self, c: mqtt.Client, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        if code.is_failure:
            log.error("the MQTT broker refused wake-ups: %s", code)
        elif self._topic is not None:
            c.subscribe(self._topic, qos=0)
        self.woken.set()  # whatever came while disconnected: poll once

    def listen(self, topic: str) -> None:
        """Be woken by ``topic`` (again after every reconnect)."""
        self._topic = topic
        self._client.subscribe(topic, qos=0)

    def wake(self, topic: str) -> None:
        self._client.publish(topic, b"", qos=0)

    def wait(self, timeout_s: float) -> bool:
        """Until a wake-up or ``timeout_s``; True when woken. Returns no sooner than
        ``MIN_POLL_GAP_S`` after it last returned."""
        woken = self.woken.wait(timeout_s)
        time.sleep(max(0.0, self._last_return + MIN_POLL_GAP_S - time.monotonic()))
        self._last_return = time.monotonic()
        return woken

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()
