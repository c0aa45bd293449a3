import pytest

from scripts.hindsight import markdown, target_rows


def _rows(points: list[tuple[float, float]]) -> list[dict[str, float]]:
    """(virtual seconds, accuracy) per round."""
    return [{"round": i + 1, "virtual_time_s": t, "accuracy": a} for i, (t, a) in enumerate(points)]


RECORDS = {
    "fixed-a": {1: _rows([(1, 0.5), (2, 0.9), (3, 0.95)]), 2: _rows([(1, 0.9), (5, 0.95)])},
    "fixed-b": {1: _rows([(4, 0.95)]), 2: _rows([(2, 0.95)])},
    "chosen": {1: _rows([(1.5, 0.96)]), 2: _rows([(1, 0.5), (9, 0.6)])},
}


def test_best_fixed_is_per_seed_and_misses_are_counted() -> None:
    rows = {r.run: r for r in target_rows(RECORDS, list(RECORDS), ["fixed-a", "fixed-b"], 0.95)}
    assert rows["fixed-a"].seconds == {1: 3, 2: 5}
    assert rows["chosen"].best_fixed == {1: "fixed-a", 2: "fixed-b"}
    # seed 1: 1.5 s against fixed-a's 3 s; seed 2 missed, so not in the mean
    assert rows["chosen"].vs_best_fixed == pytest.approx(0.5)
    assert rows["chosen"].reached == 1
    assert rows["fixed-a"].vs_best_fixed == pytest.approx((3 / 3 + 5 / 2) / 2)
    assert rows["chosen"].final_accuracy == pytest.approx((0.96 + 0.6) / 2)
    table = markdown(list(rows.values()), 0.95, "group", seeds=2)
    assert "| chosen | 0.7800 | 1/2 | 1.5 | 0.50x |" in table
