"""A20, S20, M20 and the moving-mean time to target (server/last_rounds.py)."""

import statistics

import pytest

from server.last_rounds import LastRounds, moving_mean, time_to_target


def test_the_last_twenty_rounds_only() -> None:
    accuracies = [0.1] * 10 + [0.9, 0.8] * 10  # 30 rounds; the last 20 alternate
    last = LastRounds.of(accuracies)
    assert last.rounds == 20
    assert last.mean_accuracy == pytest.approx(0.85)
    assert last.sd_accuracy == pytest.approx(0.05)  # over the rounds, not a sample estimate
    assert last.worst_accuracy == 0.8


def test_a_short_run_uses_all_its_rounds() -> None:
    last = LastRounds.of([0.2, 0.4, 0.9])
    assert (last.rounds, last.worst_accuracy) == (3, 0.2)
    assert last.sd_accuracy == pytest.approx(statistics.pstdev([0.2, 0.4, 0.9]))
    assert LastRounds.of([0.5]).sd_accuracy == 0.0
    with pytest.raises(ValueError, match="without rounds"):
        LastRounds.of([])


def test_moving_mean_waits_for_a_whole_window() -> None:
    assert moving_mean([1.0, 2.0, 3.0, 4.0], width=3) == [None, None, 2.0, 3.0]


def test_one_lucky_round_does_not_reach_a_target() -> None:
    rows = [
        {"round": r, "virtual_time_s": 2.0 * r, "accuracy": a}
        for r, a in enumerate([0.5, 0.97, 0.5, 0.9, 0.95, 0.95, 0.96, 0.97, 0.97], start=1)
    ]
    assert time_to_target(rows, 0.95, width=1) == (2, 4.0)  # the old first crossing
    assert time_to_target(rows, 0.95) == (9, 18.0)  # 0.5 leaves the window in round 8
    assert time_to_target(rows, 0.99) is None
