"""A live stream's counts on the wire: all or none, integers, and they must add up."""

from __future__ import annotations

import pytest

from wire.keys import LIVE_BUFFERED, LIVE_METRICS, LIVE_RECEIVED, STREAM_METRICS
from wire.train_reply import LiveCounts, StreamReport

COUNTS = LiveCounts(published=12, received=10, invalid=1, trained=6, dropped=3, buffered=1)


def test_a_report_with_live_counts_round_trips_and_one_without_has_none() -> None:
    report = StreamReport(
        rate=5.0, wait_s=0.1, buffer_samples=7, buffer_bytes=70, samples=6, live=COUNTS
    )
    metrics = report.to_metrics()
    assert set(metrics) == set(STREAM_METRICS) | set(LIVE_METRICS)
    assert StreamReport.parse(metrics) == report
    replay = StreamReport(rate=5.0, wait_s=0.1, buffer_samples=7, buffer_bytes=70, samples=6)
    assert set(replay.to_metrics()) == set(STREAM_METRICS)  # old records keep their shape
    assert StreamReport.parse(replay.to_metrics()) == replay


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {LIVE_BUFFERED: 2},
            "do not add up: trained 6 \\+ dropped 3 \\+ buffered 2 != received 10",
        ),
        ({LIVE_RECEIVED: -1}, "live-received -1 is not an integer >= 0"),
        ({LIVE_RECEIVED: 10.0}, "live-received 10.0 is not an integer"),
        ({LIVE_RECEIVED: True}, "live-received True is not an integer"),
    ],
)
def test_bad_live_counts_are_refused_by_name(change: dict[str, object], message: str) -> None:
    metrics = {**COUNTS.to_metrics(), **change}
    with pytest.raises(ValueError, match=message):
        LiveCounts.parse(metrics)


def test_incomplete_live_counts_are_refused() -> None:
    metrics = COUNTS.to_metrics()
    del metrics[LIVE_BUFFERED]
    with pytest.raises(ValueError, match="incomplete: live-buffered missing"):
        LiveCounts.parse(metrics)
