"""Measured times of one reply (timing = "measured"): the client's stamps and the grid's.

download = client began − server pushed; busy = client replied − client began; upload =
server pulled − client replied. Server and client stamps come from different clocks: keep the
devices on NTP. Skew moves time between download and upload (each clamped at 0) but not the
round trip.
"""

from __future__ import annotations

import math

from flwr.app import Message
from flwr.serverapp import Grid

from timing.timed_grid import TimedGrid
from wire.keys import METRICS_KEY, RECEIVED_AT, SENT_AT, TRAIN_S
from wire.tally import MeasuredTimes

MAX_SKEW_S = 1.0  # largest clock offset accepted between a device and the server
STAMP_SLACK_S = 0.01  # float rounding of wall-clock stamps


def _stamp(reply: Message, key: str) -> float:
    value = reply.content.metric_records[METRICS_KEY].get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} {value!r} is not a finite wall-clock time")
    return float(value)


def measured_times(reply: Message, grid: Grid | None) -> MeasuredTimes:
    """The reply's measured exchange; ValueError names what is missing or inconsistent."""
    if not isinstance(grid, TimedGrid):
        raise ValueError("timing = 'measured' needs the ServerApp's TimedGrid")
    trip = grid.trip(reply)
    if trip is None or trip.received_at is None:
        raise ValueError("the grid has no send and receive times for this reply")
    if METRICS_KEY not in reply.content.metric_records:
        raise ValueError(f"missing MetricRecord {METRICS_KEY!r}")
    began, replied = _stamp(reply, RECEIVED_AT), _stamp(reply, SENT_AT)
    if replied < began:
        raise ValueError(f"{SENT_AT} ({replied}) is before {RECEIVED_AT} ({began})")
    train_s = 0.0
    if TRAIN_S in reply.content.metric_records[METRICS_KEY]:
        train_s = _stamp(reply, TRAIN_S)
        if not 0.0 <= train_s <= replied - began:
            raise ValueError(f"{TRAIN_S} {train_s} is not within the busy time {replied - began}")
    # Bounds from the server's own clock: the client's busy time fits in the round trip, and
    # its clock is at most MAX_SKEW_S off (more is a device off NTP, or a forged stamp).
    round_trip = trip.received_at - trip.sent_at
    if replied - began > round_trip + STAMP_SLACK_S:
        raise ValueError(
            f"busy {replied - began:g} s is longer than the server's round trip {round_trip:g} s"
        )
    skew = min(began - trip.sent_at, trip.received_at - replied)
    if skew < -MAX_SKEW_S:
        raise ValueError(
            f"stamps are {-skew:g} s off the server's clock (more than {MAX_SKEW_S:g} s): "
            "keep the device on NTP"
        )
    return MeasuredTimes(
        download_s=max(0.0, began - trip.sent_at),
        busy_s=replied - began,
        upload_s=max(0.0, trip.received_at - replied),
        train_s=train_s,
    )
