"""The per-link-segment summary of a run's choices (commands/plot_ratio_schedule.py)."""

from __future__ import annotations

from typing import Any

import pytest

from commands.plot_ratio_schedule import link_segments
from timing.devices import DeviceProfile


def link(latency_ms: float, mbps: float) -> DeviceProfile:
    bytes_per_s = mbps * 1e6 / 8
    return DeviceProfile(
        name="test",
        train_flops_per_s=1e9,
        step_overhead_s=0.0,
        uplink_bytes_per_s=bytes_per_s,
        downlink_bytes_per_s=bytes_per_s,
        latency_s=latency_ms / 1e3,
    )


def row(
    number: int, collective: str, ratio: float, round_s: float, comm_s: float
) -> dict[str, Any]:
    return {
        "round": number,
        "collective": collective,
        "compression_ratio": ratio,
        "round_time_s": round_s,
        "comm_time_s": comm_s,
    }


def test_rounds_on_one_link_form_one_segment_with_their_choices() -> None:
    rows = [
        row(1, "allgather", 0.01, 1.0, 0.5),
        row(2, "allreduce", 0.02, 1.0, 0.9),
        row(3, "allgather", 0.001, 2.0, 2.0),
    ]
    links = [link(1, 25), link(1, 25), link(50, 5)]
    first, second = link_segments(rows, links)
    assert (first.first_round, first.last_round) == (1, 2)
    assert first.latency_ms == pytest.approx(1.0)
    assert first.uplink_mbps == pytest.approx(25.0)
    assert first.compute_share == pytest.approx((0.5 + 0.1) / 2)
    assert first.rounds_by_collective == {"allgather": 1, "allreduce": 1}
    assert first.ratios == (0.01, 0.02)
    assert (second.first_round, second.last_round, second.compute_share) == (3, 3, 0.0)
    assert "c median 0.001" in second.describe()


def test_a_link_that_returns_later_starts_a_new_segment() -> None:
    rows = [row(r, "allgather", 0.01, 1.0, 1.0) for r in (1, 2, 3)]
    segments = link_segments(rows, [link(1, 25), link(50, 5), link(1, 25)])
    assert [(s.first_round, s.last_round) for s in segments] == [(1, 1), (2, 2), (3, 3)]
