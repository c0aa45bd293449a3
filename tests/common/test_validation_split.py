"""The validation split: carved from the training data, never from the test split, kept at
the server, and taken out of every client's partition."""

import json
from pathlib import Path

import pytest

from common.data import (
    carve_validation,
    client_partition,
    server_test_split,
    server_validation_split,
    split_train_test,
)
from common.settings import ConfigError, settings_with


def _rows(data) -> set[bytes]:  # type: ignore[no-untyped-def]
    return {row.tobytes() + bytes([label]) for row, label in zip(data.x, data.y, strict=True)}


def test_validation_is_carved_from_training_and_left_out_of_the_partitions() -> None:
    settings = settings_with(num_clients=4, validation_fraction=0.1)
    train, test = split_train_test(settings)
    validation = server_validation_split(settings)
    assert validation is not None and len(validation) == 144  # ceil(0.1 x 1437)
    parts = [client_partition(settings, i) for i in range(4)]
    trained = set().union(*(_rows(p) for p in parts))
    assert not trained & _rows(validation)
    assert trained | _rows(validation) == _rows(train)
    assert not _rows(validation) & _rows(test)
    assert _rows(server_test_split(settings)) == _rows(test)  # the test split stays as it was


def test_the_carve_is_seeded_and_off_by_default() -> None:
    train, _ = split_train_test(settings_with())
    a = carve_validation(settings_with(validation_fraction=0.2, seed=1), train)[1]
    b = carve_validation(settings_with(validation_fraction=0.2, seed=1), train)[1]
    c = carve_validation(settings_with(validation_fraction=0.2, seed=2), train)[1]
    assert _rows(a) == _rows(b) != _rows(c)
    assert server_validation_split(settings_with()) is None


def test_synthetic_data_has_no_server_side_training_data_to_carve() -> None:
    with pytest.raises(ConfigError, match="validation-fraction"):
        settings_with(dataset="synthetic", validation_fraction=0.1)


@pytest.mark.usefixtures("task_identity")
def test_every_round_records_validation_beside_test(tmp_path: Path) -> None:
    from commands.run_config import resolve_settings
    from testing.in_process import InProcessGrid, run_server_app

    settings = resolve_settings(
        {
            "num-clients": 3,
            "num-server-rounds": 3,
            "validation-fraction": 0.1,
            "results-dir": str(tmp_path),
        }
    )
    run_server_app(InProcessGrid(settings))
    rows = [json.loads(line) for line in (tmp_path / "rounds.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["validation_accuracy"] <= 1.0 and r["validation_loss"] > 0 for r in rows)
    assert len({r["validation_accuracy"] for r in rows} | {r["accuracy"] for r in rows}) > 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["validation_last_rounds"]["rounds"] == 3
    assert summary["validation_last_rounds"]["mean_accuracy"] == pytest.approx(
        sum(r["validation_accuracy"] for r in rows) / 3
    )
