import pytest

from commands.hindsight import markdown, target_rows


def _rows(times: list[float], accuracies: list[float]) -> list[dict[str, float]]:
    return [
        {"round": i + 1, "virtual_time_s": t, "accuracy": a}
        for i, (t, a) in enumerate(zip(times, accuracies, strict=True))
    ]


STEADY = [0.95] * 5
RECORDS = {
    "fixed-a": {1: _rows([1, 2, 3, 4, 5], STEADY), 2: _rows([2, 4, 6, 8, 10], STEADY)},
    "fixed-b": {1: _rows([2, 4, 6, 8, 10], STEADY), 2: _rows([1, 2, 3, 4, 5], STEADY)},
    "chosen": {
        1: _rows([0.5, 1, 1.5, 2, 2.5], [0.96] * 5),
        # one lucky round is no hit: the 5-round moving mean never reaches 0.95
        2: _rows([1, 2, 3, 4, 5], [0.5, 0.99, 0.5, 0.5, 0.5]),
    },
}


def test_best_fixed_is_per_seed_and_misses_are_counted() -> None:
    rows = {r.run: r for r in target_rows(RECORDS, list(RECORDS), ["fixed-a", "fixed-b"], 0.95)}
    assert rows["fixed-a"].seconds == {1: 5, 2: 10}  # the moving mean is whole in round 5
    assert rows["chosen"].best_fixed == {1: "fixed-a", 2: "fixed-b"}
    # seed 1: 2.5 s against fixed-a's 5 s; seed 2 missed, so not in the mean
    assert rows["chosen"].vs_best_fixed == pytest.approx(0.5)
    assert rows["chosen"].reached == 1
    assert rows["fixed-a"].vs_best_fixed == pytest.approx((5 / 5 + 10 / 5) / 2)
    assert rows["chosen"].a20 == pytest.approx((0.96 + (0.99 + 4 * 0.5) / 5) / 2)
    table = markdown(list(rows.values()), 0.95, "group")
    assert "| chosen | 0.7790 | 1/2 | 2.5 | 0.50x |" in table
    one_seed = target_rows({"fixed-a": {1: RECORDS["fixed-a"][1]}}, ["fixed-a"], [], 0.95)
    assert "| fixed-a | 0.9500 | 1/1 | 5.0 | - |" in markdown(one_seed, 0.95, "group")


def test_the_validation_field_is_read_instead_of_the_test_split() -> None:
    # the test split holds 0.95 every round, the validation split 0.9
    records = {
        "run": {
            1: [
                {**row, "validation_accuracy": v}
                for row, v in zip(_rows([1, 2, 3, 4, 5], STEADY), [0.9] * 5, strict=True)
            ]
        }
    }
    on_test = target_rows(records, ["run"], [], 0.95)[0]
    on_validation = target_rows(records, ["run"], [], 0.9, field="validation_accuracy")[0]
    missed = target_rows(records, ["run"], [], 0.95, field="validation_accuracy")[0]
    assert on_test.seconds == {1: 5} and on_test.a20 == pytest.approx(0.95)
    assert on_validation.seconds == {1: 5} and on_validation.a20 == pytest.approx(0.9)
    assert missed.seconds == {1: None}
