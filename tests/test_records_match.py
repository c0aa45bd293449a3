"""The cross-machine record comparison still catches real changes (tests/records_match.py)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.records_match import (
    FLOAT_REL_TOL,
    cut_margin,
    differences,
    round_differences,
)

GOLDEN = Path(__file__).parent / "golden"


def _rounds(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines()]


def _changed(rows: list[dict[str, Any]], round_index: int, **fields: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(rows)
    out[round_index].update(fields)
    return out


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    return _rounds("auto-nsga2-c1-edge")


def test_last_bit_float_differences_pass(rows: list[dict[str, Any]]) -> None:
    moved = copy.deepcopy(rows)
    for row in moved:
        row["loss"] *= 1 + 1e-7
        row["phases"][0]["duration_s"] *= 1 - 1e-7
    assert round_differences(moved, rows, None) == []


def test_a_float_beyond_the_tolerance_is_caught(rows: list[dict[str, Any]]) -> None:
    off = rows[2]["train_loss"] * (1 + 10 * FLOAT_REL_TOL)
    assert round_differences(_changed(rows, 2, train_loss=off), rows, None) == [
        f"round 3.train_loss: {off!r}, want {rows[2]['train_loss']!r} (relative tolerance 1e-05)"
    ]


def test_a_byte_count_off_by_one_is_caught(rows: list[dict[str, Any]]) -> None:
    found = round_differences(_changed(rows, 0, bytes_up=rows[0]["bytes_up"] + 1), rows, None)
    assert found == [f"round 1.bytes_up: {rows[0]['bytes_up'] + 1}, want {rows[0]['bytes_up']}"]


def test_nested_fields_are_compared(rows: list[dict[str, Any]]) -> None:
    moved = copy.deepcopy(rows)
    moved[0]["phases"][1]["bytes_up"] += 8
    assert [d.split(":")[0] for d in round_differences(moved, rows, None)] == [
        "round 1.phases[1].bytes_up"
    ]


def test_an_integer_that_became_a_float_is_caught(rows: list[dict[str, Any]]) -> None:
    found = round_differences(_changed(rows, 0, num_clients=4.0), rows, None)
    assert found == ["round 1.num_clients: 4.0 (float), want 4 (int)"]


def test_a_missing_or_extra_field_is_caught(rows: list[dict[str, Any]]) -> None:
    moved = copy.deepcopy(rows)
    del moved[1]["comm_time_s"]
    moved[1]["new_field"] = 1
    assert round_differences(moved, rows, None) == [
        "round 2: keys differ (extra ['new_field'], missing ['comm_time_s'])"
    ]


def test_a_changed_decision_is_caught_after_a_near_tie(rows: list[dict[str, Any]]) -> None:
    """From the near-tie round on, floats may wander but decisions may not."""
    near_tie = 11
    assert rows[38]["collective"] == "allgather"
    wandered = copy.deepcopy(rows)
    for row in wandered[near_tie - 1 :]:
        row["accuracy"] += 0.01
        row["bytes_down"] += 64
    assert round_differences(wandered, rows, near_tie) == []
    assert round_differences(wandered, rows, None) != []
    switched = _changed(wandered, 38, collective="allreduce")
    assert round_differences(switched, rows, near_tie) == [
        "round 39 (decisions).collective: 'allreduce', want 'allgather'"
    ]
    ratio = rows[39]["compression_ratio"] * 1.01
    assert round_differences(_changed(wandered, 39, compression_ratio=ratio), rows, near_tie)


def test_rounds_before_a_near_tie_are_compared_in_full(rows: list[dict[str, Any]]) -> None:
    found = round_differences(_changed(rows, 9, accuracy=rows[9]["accuracy"] + 0.01), rows, 11)
    assert [d.split(":")[0] for d in found] == ["round 10.accuracy"]


def test_a_missing_round_is_caught(rows: list[dict[str, Any]]) -> None:
    assert round_differences(rows[:-1], rows, 11) == ["39 rounds, want 40"]


def test_nan_equals_nan_and_nothing_else() -> None:
    assert differences(math.nan, math.nan) == []
    assert differences(math.nan, 1.0, "x") == ["x: nan, want 1.0 (relative tolerance 1e-05)"]


def test_cut_margin_is_the_relative_gap_across_the_cut() -> None:
    values = np.array([4.0, 1.0, 2.0, 1.99], dtype=np.float32)
    assert cut_margin(values, 2) == pytest.approx((2.0 - 1.99) / 2.0, rel=1e-6)
    assert cut_margin(values, 4) == math.inf  # nothing is cut


def test_an_exact_tie_does_not_count_but_a_near_value_beside_it_does() -> None:
    exact_tie = np.array([2.5, 2.0, 2.0, 1.0], dtype=np.float32)
    assert cut_margin(exact_tie, 2) == pytest.approx(0.25, rel=1e-6)  # 2.5 is nearest, above
    near = np.array([2.0 + 1e-5, 2.0, 2.0, 1.0], dtype=np.float32)
    assert cut_margin(near, 2) < 1e-5


def test_a_cut_among_zeros_cannot_move() -> None:
    assert cut_margin(np.array([1.0, 0.0, 0.0], dtype=np.float32), 2) == math.inf
