"""A device's live stream: samples that arrive over MQTT while its agent runs.

The agent subscribes to its node's topic (``wire.stream_samples.sample_topic``) with QoS 1 in
a persistent session (client id ``edgeflex-node-<partition-id>``, clean session off), so what
is published while the agent is down waits at the broker and arrives when it comes back.
paho's network thread decodes each message (``decode_sample``: a bad one is counted and
dropped, never raised) and appends it to an in-memory store; the ClientApp reads the store
through the ``StreamSource`` protocol in the agent's wall-clock time:

- ``read_until(t)``: ids of the samples that reached the agent up to ``t`` (waiting for ``t``
  if it is still ahead);
- ``time_until(count)``: blocks until ``count`` more samples arrived (at most
  ``max_wait_s``) and says how long that took, so the batch policy's waits are real waits.

The buffer (``StreamBuffer``: persistence or truncation, capacity) lives here too, not in
``context.state``: its ids name samples in this process's memory. Samples the buffer no
longer holds are released. The rate is measured from the publishers' own stamps (``t``) of the
latest samples, so a burst the broker kept while the agent was down does not inflate it.

A sample is data from the network, so neither its ``seq`` nor its stamp can take a sensor
over (the broker's ACL keeps others off the topic; this holds without it): a redelivery is a
seq seen among the last ``REDELIVERY_WINDOW`` (not any seq below the highest, so one forged
2**63-1 locks nothing out), a jump in seq counts at most ``MAX_SEQ_GAP`` samples as published,
a seq 0 with the session's first stamp is a redelivery, not a restart, a stamp ahead of this
device's clock by more than ``CLOCK_SKEW_MAX_S`` is refused (with one warning), and the rate
reads the stamps of samples that came live (``STAMP_LAG_MAX_S``), so stamps far in the past
do not slow it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from numpy.typing import NDArray

from client.buffer import StreamBuffer
from common.data import ArrayData
from wire.stream_samples import (
    ANONYMOUS,
    DEFAULT_TOPIC_PREFIX,
    BrokerAddress,
    BrokerAuth,
    SampleError,
    decode_sample,
    sample_topic,
)
from wire.train_reply import LiveCounts

log = logging.getLogger("edgeflex.live")

LIVE_WAIT_MAX_S = 30.0  # longest a step waits for samples that do not come
RATE_WINDOW = 1024  # samples whose publish stamps measure the rate (a late stamp barely moves it)
STORE_MAX = 200_000  # samples held unread; beyond, the oldest are dropped (and counted)
PENDING_MAX_BYTES = 64 << 20  # raw messages held before the run says what a sample looks like
MAX_COUNT = 2**53  # counts stay exact as floats and fit the wire's integers
QOS = 1
REDELIVERY_WINDOW = 8192  # seqs remembered: QoS 1 redelivers what was not yet acknowledged
MAX_SEQ_GAP = STORE_MAX  # a jump in seq counts at most this many samples as published
CLOCK_SKEW_MAX_S = 300.0  # a publisher's stamp may be this far ahead of the device's clock
STAMP_LAG_MAX_S = 60.0  # a stamp older than this when its sample arrives did not come live


class LiveStream:
    """Samples from one MQTT topic, buffered for training (thread-safe)."""

    def __init__(
        self,
        partition_id: int,
        *,
        max_wait_s: float = LIVE_WAIT_MAX_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.partition_id = partition_id
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._wall_clock = wall_clock  # publishers stamp samples in Unix seconds
        self._epoch = clock()
        self._arrived = threading.Condition()
        self._pending: deque[bytes] = deque()  # before the shape is known
        self._pending_bytes = 0
        self._shape: tuple[int, int] | None = None  # (features, classes)
        self._x: list[NDArray[np.float32]] = []
        self._y: list[int] = []
        self._seq: list[int] = []  # samples published by each one's arrival (counted when read)
        self._at: list[float] = []  # stream seconds each sample reached the store
        # publishers' t, and how long before the sample's arrival (device's clock) that was
        self._stamps: deque[tuple[float, float]] = deque(maxlen=RATE_WINDOW)
        self._first_id = 0  # id of self._x[0]: released samples are gone
        self._read = 0  # next id to hand out
        self.clock_s = 0.0  # the time read up to
        self.buffer: StreamBuffer | None = None
        self.published = self.received = self.invalid = self.trained = 0
        self._top_seq: int | None = None  # the highest seq of the publisher's session
        self._first_stamp: float | None = None  # of the session's seq 0 (a redelivery repeats it)
        self._seen: set[int] = set()  # the session's latest seqs (``REDELIVERY_WINDOW``)
        self._seen_order: deque[int] = deque()
        self._published_total = 0  # published up to the highest seq of every session so far
        self._warned_clock = False
        self._dropped_before = 0  # by buffers replaced, and for want of room
        self._interrupted = False

    # --- arrivals (paho's thread) -------------------------------------------------------------

    def on_payload(self, payload: bytes) -> None:
        with self._arrived:
            if self._shape is None:
                if self._pending_bytes + len(payload) > PENDING_MAX_BYTES:
                    self.invalid += 1  # no room before the first round: refused like a bad one
                    return
                self._pending.append(payload)
                self._pending_bytes += len(payload)
            else:
                self._add(payload)
            self._arrived.notify_all()

    def _add(self, payload: bytes) -> None:
        """Decode and store one message; a bad or repeated one is counted invalid."""
        assert self._shape is not None
        try:
            sample = decode_sample(payload, features=self._shape[0], classes=self._shape[1])
        except SampleError:
            self.invalid += 1
            return
        top = self._top_seq
        lag = self._wall_clock() - sample.sent_at
        if lag < -CLOCK_SKEW_MAX_S:  # stamped in the future
            self.invalid += 1
            if not self._warned_clock:
                self._warned_clock = True
                log.warning(
                    "partition %d: samples stamped %.0f s ahead of this device's clock are "
                    "refused (more than %.0f s): set both clocks (NTP)",
                    self.partition_id,
                    -lag,
                    CLOCK_SKEW_MAX_S,
                )
            return
        if top is not None and sample.seq == 0 and sample.sent_at != self._first_stamp:
            top = None  # the publisher restarted: a new session
            self._seen.clear()
            self._seen_order.clear()
        elif sample.seq in self._seen:  # QoS 1 delivers at least once: a redelivery
            self.invalid += 1
            return
        if top is None:
            self._first_stamp = sample.sent_at if sample.seq == 0 else None
            self._published_total += min(sample.seq + 1, MAX_SEQ_GAP)
        elif sample.seq > top:  # a late sample (below the top) was counted with the gap
            self._published_total += min(sample.seq - top, MAX_SEQ_GAP)
        self._remember(sample.seq)
        self._top_seq = sample.seq if top is None else max(top, sample.seq)
        self._x.append(sample.x)
        self._y.append(sample.y)
        self._seq.append(self._published_total)
        self._at.append(self.now_s())
        self._stamps.append((sample.sent_at, lag))
        unread = self._first_id + len(self._at) - self._read
        if unread > STORE_MAX:  # nobody reads (no run, or streams off): keep the newest
            self._read += 1
            self.received += 1
            self._dropped_before += 1
            self._count_published(self._read)
            self._forget_before(self._held_from())

    def _remember(self, seq: int) -> None:
        self._seen.add(seq)
        self._seen_order.append(seq)
        if len(self._seen_order) > REDELIVERY_WINDOW:
            self._seen.discard(self._seen_order.popleft())

    def _count_published(self, stop: int) -> None:
        """Published: what had been published when the last sample read arrived."""
        self.published = max(self.published, min(MAX_COUNT, self._seq[stop - 1 - self._first_id]))

    def configure(self, features: int, classes: int, policy: str, capacity: int) -> None:
        """What the run's samples look like and how it buffers them: a run with another shape
        starts a new store, another policy a new buffer (what they held counts as dropped)."""
        with self._arrived:
            buffer = self.buffer
            if self._shape != (features, classes):
                if self._shape is not None:  # samples of the old shape are no use any more
                    self._dropped_before += 0 if buffer is None else len(buffer)
                    if buffer is not None:
                        buffer.ids = buffer.ids[:0]
                    self._forget_before(self._first_id + len(self._at))
                    self._read = self._first_id
                self._shape = (features, classes)
                while self._pending:
                    self._add(self._pending.popleft())
                self._pending_bytes = 0
            if buffer is None or (buffer.policy, buffer.capacity) != (policy, capacity):
                if buffer is not None:  # what the old buffer held is dropped with it
                    self._dropped_before += buffer.dropped + len(buffer)
                self.buffer = StreamBuffer(policy, capacity)

    def interrupt(self) -> None:
        """Stop waiting for samples (the agent is stopping): waits return at once."""
        with self._arrived:
            self._interrupted = True
            self._arrived.notify_all()

    # --- StreamSource ---------------------------------------------------------------------------

    def now_s(self) -> float:
        return self._clock() - self._epoch

    @property
    def rate(self) -> float:
        """Samples/s over the span of the publishers' stamps of the latest samples: of those
        that came live (stamped at most ``STAMP_LAG_MAX_S`` before they arrived) when two did,
        else of all (else since start)."""
        with self._arrived:
            live = [t for t, lag in self._stamps if lag <= STAMP_LAG_MAX_S]
            stamps = live if len(live) >= 2 else [t for t, _ in self._stamps]
            if len(stamps) >= 2 and max(stamps) > min(stamps):
                return (len(stamps) - 1) / (max(stamps) - min(stamps))
            return max(len(self._x) + self._first_id, 1) / max(self.now_s(), 1e-3)

    def _count_until(self, time_s: float) -> int:
        """Ids < this one reached the store by ``time_s``."""
        stop = self._read
        end = self._first_id + len(self._at)
        while stop < end and self._at[stop - self._first_id] <= time_s:
            stop += 1
        return stop

    def read_until(self, time_s: float) -> NDArray[np.int64]:
        delay = time_s - self.now_s()
        if delay > 0:
            time.sleep(delay)
        with self._arrived:
            stop = self._count_until(time_s)
            ids = np.arange(self._read, stop, dtype=np.int64)
            if ids.size:
                self._count_published(stop)
            self._read = stop
            self.received += ids.size
            self.clock_s = max(self.clock_s, time_s)
            return ids

    def time_until(self, count: int) -> float:
        if count <= 0:
            return 0.0
        deadline = self.now_s() + self.max_wait_s
        with self._arrived:
            while True:
                unread = self._first_id + len(self._at) - self._read
                if unread >= count:
                    arrival = self._at[self._read + count - 1 - self._first_id]
                    return max(0.0, arrival - self.clock_s)
                left = deadline - self.now_s()
                if left <= 0 or self._interrupted:
                    return max(0.0, self.now_s() - self.clock_s)
                self._arrived.wait(left)

    # --- the round's data ---------------------------------------------------------------------

    def samples(self, ids: NDArray[np.int64]) -> ArrayData:
        """Features and labels of samples still held."""
        with self._arrived:
            if ids.size and (ids.min() < self._first_id or ids.max() >= self._read):
                raise ValueError(f"samples {ids.min()}..{ids.max()} are not held")
            rows = (ids - self._first_id).tolist()
            x = np.stack([self._x[i] for i in rows]) if rows else np.empty((0, 0), np.float32)
            y = np.asarray([self._y[i] for i in rows], dtype=np.int64)
        return ArrayData(x=x, y=y)

    def release(self, trained: int) -> None:
        """After a round: count what was trained on, forget what the buffer no longer holds."""
        with self._arrived:
            self.trained += trained
            self._forget_before(self._held_from())

    def _held_from(self) -> int:
        """The oldest id still needed: the buffer's oldest, else the next to read."""
        held = self.buffer.ids if self.buffer is not None else np.empty(0, np.int64)
        return min(int(held.min()), self._read) if held.size else self._read

    def _forget_before(self, keep_from: int) -> None:
        drop = keep_from - self._first_id
        if drop > 0:
            del self._x[:drop], self._y[:drop], self._seq[:drop], self._at[:drop]
            self._first_id = keep_from

    def counts(self) -> LiveCounts:
        with self._arrived:
            buffer = self.buffer
            return LiveCounts(
                published=self.published,
                received=self.received,
                invalid=self.invalid,
                trained=self.trained,
                dropped=self._dropped_before + (0 if buffer is None else buffer.dropped),
                buffered=0 if buffer is None else len(buffer),
            )


def _session_client(partition_id: int, topic_prefix: str, auth: BrokerAuth) -> mqtt.Client:
    """The node's MQTT client: its persistent session, subscribed (QoS 1) on every connect;
    a refused connection is logged (paho retries it)."""
    topic = sample_topic(topic_prefix, partition_id)
    client = mqtt.Client(
        callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
        client_id=session_id(partition_id),
        clean_session=False,
    )
    auth.apply(client)

    def on_connect(c: mqtt.Client, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        if code.is_failure:
            log.error("the MQTT broker refused %s: %s", session_id(partition_id), code)
        else:
            c.subscribe(topic, qos=QOS)

    client.on_connect = on_connect
    return client


def subscribe(
    stream: LiveStream,
    broker: BrokerAddress,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    auth: BrokerAuth = ANONYMOUS,
) -> mqtt.Client:
    """Connect ``stream`` to its topic: QoS 1, a persistent session, reconnecting by itself."""
    client = _session_client(stream.partition_id, topic_prefix, auth)

    def on_message(c: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        stream.on_payload(bytes(message.payload))

    client.on_message = on_message
    client.connect(broker.host, broker.port)
    client.loop_start()
    return client


def session_id(partition_id: int) -> str:
    """The node's MQTT client id: its persistent session at the broker."""
    return f"edgeflex-node-{partition_id}"


def open_session(
    broker: BrokerAddress,
    partition_id: int,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    timeout_s: float = 10.0,
    auth: BrokerAuth = ANONYMOUS,
) -> None:
    """Create the node's persistent session (subscribed, QoS 1) and leave: from now on the
    broker keeps the node's samples until its agent takes them, whenever it starts."""
    client = _session_client(partition_id, topic_prefix, auth)
    done = threading.Event()
    client.on_subscribe = lambda *args: done.set()
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        if not done.wait(timeout_s):
            raise RuntimeError(f"MQTT broker {broker} did not confirm the subscription")
    finally:
        client.disconnect()
        client.loop_stop()
