"""Measured times: stamps from the client, push and pull times from the grid, the clock."""

import math

import pytest
from flwr.app import MetricRecord, RecordDict

from tests.helpers import Rounds, reply_message, unit_clock
from timing.devices import DeviceProfile
from timing.measured import measured_times
from timing.timed_grid import RoundTrip, TimedGrid
from wire.keys import METRICS_KEY, RECEIVED_AT, SENT_AT, TRAIN_S
from wire.tally import ClientWork, MeasuredTimes

pytestmark = pytest.mark.usefixtures("task_identity")


class OneTripGrid(TimedGrid):
    def __init__(self, trip: RoundTrip | None) -> None:
        self._trip = trip

    def trip(self, reply):  # type: ignore[no-untyped-def]
        return self._trip


def _reply(**metrics: float):  # type: ignore[no-untyped-def]
    return reply_message(RecordDict({METRICS_KEY: MetricRecord(dict(metrics))}), src_node_id=7)


def test_download_busy_upload_from_the_four_stamps() -> None:
    grid = OneTripGrid(RoundTrip(7, sent_at=100.0, received_at=112.5))
    got = measured_times(_reply(**{RECEIVED_AT: 108.0, SENT_AT: 110.0, TRAIN_S: 1.5}), grid)
    assert got == MeasuredTimes(download_s=8.0, busy_s=2.0, upload_s=2.5, train_s=1.5)
    assert measured_times(_reply(**{RECEIVED_AT: 108.0, SENT_AT: 110.0}), grid).train_s == 0.0


def test_small_clock_skew_is_clamped_large_skew_refused() -> None:
    # The client's clock runs 0.5 s ahead and it replied 0.2 s before the server pulled:
    # upload would be negative, so it is 0.
    grid = OneTripGrid(RoundTrip(7, sent_at=100.0, received_at=112.5))
    got = measured_times(_reply(**{RECEIVED_AT: 110.5, SENT_AT: 112.8}), grid)
    assert got.upload_s == 0.0 and got.download_s == 10.5 and got.busy_s == pytest.approx(2.3)
    # 9 s ahead (or a forged stamp): refused, not charged.
    with pytest.raises(ValueError, match="9.5 s off the server's clock"):
        measured_times(_reply(**{RECEIVED_AT: 117.0, SENT_AT: 122.0}), grid)
    with pytest.raises(ValueError, match="longer than the server's round trip"):
        measured_times(_reply(**{RECEIVED_AT: 1e5, SENT_AT: 2e5}), grid)


@pytest.mark.parametrize(
    ("metrics", "trip", "match"),
    [
        ({RECEIVED_AT: 1.0}, RoundTrip(7, 0.0, 5.0), "sent-at None"),
        ({RECEIVED_AT: 1.0, SENT_AT: math.nan}, RoundTrip(7, 0.0, 5.0), "sent-at nan"),
        ({RECEIVED_AT: 3.0, SENT_AT: 2.0}, RoundTrip(7, 0.0, 5.0), "before received-at"),
        ({RECEIVED_AT: 1.0, SENT_AT: 2.0}, None, "no send and receive times"),
        ({RECEIVED_AT: 1.0, SENT_AT: 2.0, TRAIN_S: 3.0}, RoundTrip(7, 0.0, 5.0), "within the busy"),
        ({RECEIVED_AT: 1.0, SENT_AT: 2.0}, RoundTrip(7, 0.0, None), "no send and receive"),
    ],
)
def test_bad_stamps_are_named(metrics, trip, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        measured_times(_reply(**metrics), OneTripGrid(trip))


def test_measured_needs_the_timed_grid() -> None:
    with pytest.raises(ValueError, match="TimedGrid"):
        measured_times(_reply(**{RECEIVED_AT: 1.0, SENT_AT: 2.0}), None)


def test_the_clock_charges_measured_times_and_the_measured_phase() -> None:
    profile = DeviceProfile("slow", 1.0, 0.0, 1.0, 1.0, 10.0)  # models would say hours
    clock = unit_clock({0: profile, 1: profile})
    works = [
        ClientWork(0, 10_000, 500, 10_000, measured=MeasuredTimes(3.0, 2.0, 0.5)),
        ClientWork(1, 10_000, 500, 10_000, measured=MeasuredTimes(1.0, 1.0, 1.0)),
    ]
    phase = clock.phase("train", works)
    assert phase.duration_s == 5.5  # the slowest client, waits inside its busy time
    assert phase.clients[0].compute_s == 2.0
    waited = clock.phase("train", works, wall_s=20.0)  # the server waited for a lost node
    assert waited.duration_s == 20.0
    assert clock.advance([waited]) == 20.0 and clock.now_s == 20.0


def test_measured_rounds_feed_the_link_estimator_and_auto_chooses_on_them() -> None:
    """In process, the ClientApp stamps its replies, the TimedGrid times the exchanges, and
    the clock, the estimator and collective = auto run on those times, not on the models."""
    import numpy as np

    from common.data import DIGITS_SPEC
    from common.models import build_model
    from server.build import build_strategy
    from testing.in_process import InProcessGrid, train_in_process
    from tests.helpers import federation_settings
    from wire.layout import Layout

    settings = federation_settings(
        compression_ratio=0.1,
        collective="auto",
        auto_collectives="allreduce,allgather",
        timing="measured",
    )
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    # Modelled links of 1 byte/s: any modelled time would be enormous.
    profile = DeviceProfile("modelled-only", 1.0, 0.0, 1.0, 1.0, 5.0)
    strategy = build_strategy(settings, unit_clock({i: profile for i in range(3)}), layout)
    grid = TimedGrid(InProcessGrid(settings), poll_s=1e-3)  # type: ignore[arg-type]
    rounds = Rounds()
    train_in_process(strategy, settings, model, grid, 4, rounds)  # type: ignore[arg-type]
    stats = [rounds[r] for r in (1, 2, 3, 4)]
    assert [s.time_source for s in stats] == ["measured"] * 4
    assert [s.collective for s in stats[:2]] == ["allreduce", "allgather"]  # the probes
    for s in stats:
        assert 0 < s.round_time_s < 60  # wall-clock seconds, not the model's hours
        assert all("busy_s_max" in p for p in s.phases)
        assert 0 < s.phases[0]["train_s_max"] <= s.phases[0]["busy_s_max"]
        assert s.failed == []
    assert [p["name"] for p in stats[0].phases] == ["train", "indices", "values"]
    assert stats[3].estimated_links is not None and len(stats[3].estimated_links) == 3
    predicted = stats[3].predicted
    assert predicted is not None and set(predicted) == {"allgather", "allreduce"}
    assert all(np.isfinite(seconds) for seconds in predicted.values())
