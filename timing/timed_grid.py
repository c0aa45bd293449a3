"""A Grid that notes when each message left and when its reply came back (wall clock).

Flower's deployment grid polls for replies every 3 s, so a reply's arrival is only known to
within 3 s, and every phase costs a multiple of 3 s. ``TimedGrid`` delegates everything to the
grid it wraps but runs ``send_and_receive`` itself with a short poll interval, and remembers,
per message id, the push time and the time the reply was pulled. The strategies read these to
measure each client's round trip (timing = "measured").

With wake-ups (``common.wake_ups``, ``wake-broker``), it names each node on its topic after
pushing its message, and instead of polling it waits for a node's wake-up, polling every
``FALLBACK_POLL_S`` otherwise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flwr.app import Message
from flwr.serverapp import Grid

from common.flower_patches import late_objects_until
from common.wake_ups import FALLBACK_POLL_S, node_topic
from common.wrapped_grid import WrappedGrid

if TYPE_CHECKING:  # paho-mqtt is imported only when a run has a wake-broker
    from common.wake_ups import WakeUps

DEFAULT_POLL_S = 0.1
SIMULATION_POLL_S = 0.005  # the grid is in the simulation's own process: a poll is cheap
FIRST_POLL_S = 0.002  # the first wait; each next one doubles, up to the poll interval


@dataclass(frozen=True)
class RoundTrip:
    """Server-side wall-clock times of one message and its reply."""

    dst_node_id: int
    sent_at: float
    received_at: float | None  # None: no reply (yet)


class TimedGrid(WrappedGrid):
    def __init__(
        self,
        inner: Grid,
        poll_s: float = DEFAULT_POLL_S,
        clock: Callable[[], float] = time.time,
        wake_ups: WakeUps | None = None,
    ) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll interval must be > 0 s, got {poll_s}")
        super().__init__(inner)
        self._poll_s = poll_s
        self._clock = clock
        self._wake_ups = wake_ups
        self._trips: dict[str, RoundTrip] = {}
        self.exchange_s: list[float] = []  # each send_and_receive: push to return, in order

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        now = self._clock()  # when they leave: a push may take a while (or, in process, run them)
        ids = list(self._inner.push_messages(messages))
        for message_id, message in zip(ids, messages, strict=True):
            if message_id:  # Flower returns "" for a message it could not push
                self._trips[message_id] = RoundTrip(message.metadata.dst_node_id, now, None)
                if self._wake_ups is not None:
                    self._wake_ups.wake(node_topic(message.metadata.dst_node_id))
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self._inner.pull_messages(message_ids))
        now = self._clock()
        for reply in replies:
            trip = self._trips.get(reply.metadata.reply_to_message_id)
            if trip is not None and trip.received_at is None:
                self._trips[reply.metadata.reply_to_message_id] = RoundTrip(
                    trip.dst_node_id, trip.sent_at, now
                )
        return replies

    # --- timed --------------------------------------------------------------------------------

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push, then pull until all replies came or ``timeout`` passed: first after 2 ms,
        then after twice the last wait, up to every ``poll_s``. A round's replies are seen
        within about its own length (a fixed 0.1-s poll made every short round cost 0.2 s).
        With wake-ups: pull when a node says it replied, or every ``FALLBACK_POLL_S``."""
        began = self._clock()
        pending = {i for i in self.push_messages(messages) if i}
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        wait_s = min(FIRST_POLL_S, self._poll_s)
        with late_objects_until(deadline):
            while pending:
                if self._wake_ups is not None:
                    self._wake_ups.woken.clear()  # before the pull: a wake-up during it is kept
                pulled_at = time.monotonic()
                pulled = list(self.pull_messages(pending))
                replies.extend(pulled)
                pending -= {m.metadata.reply_to_message_id for m in pulled}
                if not pending:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    if pulled_at >= deadline:
                        break
                    # The deadline passed during the pull (a reply's late objects, waited
                    # for until then): one more pull keeps the replies that came meanwhile.
                    continue
                self._wait(deadline, wait_s)
                wait_s = min(2 * wait_s, self._poll_s)
        self.exchange_s.append(self._clock() - began)
        return replies

    def _wait(self, deadline: float | None, wait_s: float) -> None:
        """Until the next pull: a wake-up (or ``FALLBACK_POLL_S``), or ``wait_s``."""
        if self._wake_ups is None:
            time.sleep(wait_s)
            return
        left = math.inf if deadline is None else deadline - time.monotonic()
        self._wake_ups.wait(max(0.0, min(FALLBACK_POLL_S, left)))

    def trip(self, reply: Message) -> RoundTrip | None:
        """The round trip that ``reply`` answered, if this grid sent it."""
        return self._trips.get(reply.metadata.reply_to_message_id)

    def destination(self, reply: Message) -> int | None:
        """The node a reply answers for (Flower's own error replies come from node 0)."""
        trip = self.trip(reply)
        return None if trip is None else trip.dst_node_id

    def forget(self) -> None:
        """Drop the times of earlier exchanges (called as each round is configured)."""
        self._trips.clear()
        self.exchange_s.clear()
