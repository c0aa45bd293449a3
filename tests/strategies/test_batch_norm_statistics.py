"""Batch-norm statistics recomputed at the weights (common/batch_norm.py) and the policy that
puts them into the global model (strategies/policies/statistics.py)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from collectives.base import DenseUpdate
from common.batch_norm import recompute_statistics, statistics_positions
from common.data import ArrayData
from common.params import model_to_vector
from common.settings import ConfigError, settings_with
from strategies.policies.statistics import STATISTICS, Averaged, Recomputed
from tests.helpers import Rounds, assert_replicas_hold_the_model_before_last
from wire.codec import Sparse


def _model() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))


def _data(samples: int = 50) -> ArrayData:
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(samples, 4)) * 3 + 1).astype(np.float32)
    return ArrayData(x=x, y=rng.integers(0, 2, size=samples))


def test_statistics_positions_are_the_means_and_variances_not_the_counter() -> None:
    # state_dict order: 0.weight (12), 0.bias (3), 1.weight (3), 1.bias (3), 1.running_mean,
    # 1.running_var, 1.num_batches_tracked, 3.weight, 3.bias
    np.testing.assert_array_equal(statistics_positions(_model()), np.arange(21, 27))
    assert statistics_positions(nn.Linear(2, 2)).size == 0


def test_recomputed_statistics_are_the_datas_at_the_given_weights() -> None:
    model, data = _model(), _data()
    vector = model_to_vector(model)
    vector[:12] *= 2.0  # other weights than the model holds: the statistics must follow these
    out = recompute_statistics(model, vector, data)
    weight = torch.from_numpy(vector[:12].reshape(3, 4))
    hidden = torch.from_numpy(data.x) @ weight.T + torch.from_numpy(vector[12:15])
    np.testing.assert_allclose(out[21:24], hidden.mean(dim=0).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[24:27], hidden.var(dim=0).numpy(), rtol=1e-5)  # unbiased
    not_statistics = np.setdiff1d(np.arange(vector.size), np.arange(21, 27))
    np.testing.assert_array_equal(out[not_statistics], vector[not_statistics])  # counter too
    assert model[1].momentum == 0.1  # restored after the cumulative pass


def test_a_model_without_batch_norm_is_returned_as_it_is() -> None:
    model = nn.Linear(4, 2)
    vector = model_to_vector(model)
    assert recompute_statistics(model, vector, _data()) is vector


@pytest.mark.parametrize("kind", ["sparse", "dense"])
def test_recomputed_policy_sets_the_statistics_of_the_new_weights(kind: str) -> None:
    model, data = _model(), _data()
    start = model_to_vector(model)
    weights = np.array([0, 5, 30], dtype=np.int64)
    values = np.array([0.5, -0.4, 0.3], dtype=np.float32)
    step = (
        Sparse(weights, values, start.size)
        if kind == "sparse"
        else DenseUpdate(Sparse(weights, values, start.size).dense())
    )
    settled = Recomputed(model, data).settle(start, step)
    new = settled.apply_to(start)
    expected = recompute_statistics(model, step.apply_to(start), data)
    np.testing.assert_allclose(new, expected, rtol=1e-6, atol=1e-6)
    assert not np.allclose(new[21:27], start[21:27])  # the statistics did move
    if isinstance(settled, Sparse):  # the replicas follow: the statistics are in the step
        np.testing.assert_array_equal(settled.indices, np.union1d(weights, np.arange(21, 27)))


def test_averaged_policy_leaves_the_step_alone() -> None:
    step = Sparse(np.array([1]), np.array([1.0], dtype=np.float32), 30)
    assert STATISTICS[Averaged.name](_model(), None).settle(np.zeros(30, np.float32), step) is step


@pytest.mark.parametrize(
    "overrides,key",
    [
        ({"batch_norm_statistics": "recomputed"}, "batch-norm-statistics"),
        ({"batch_norm_diagnosis": True}, "batch-norm-diagnosis"),
    ],
)
def test_recomputing_without_a_validation_split_is_refused_by_name(
    overrides: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=f"{key}.*validation-fraction"):
        settings_with(**overrides)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_replicas_follow_recomputed_statistics_bit_for_bit(collective: str) -> None:
    """Top-k rounds on the batch-norm MLP with statistics recomputed on a validation split:
    the global model's statistics are its weights' own, and every replica holds the model
    the last round started from."""
    from common.data import DIGITS_SPEC, server_validation_split
    from common.models import build_model
    from common.params import buffer_positions
    from server.build import build_strategy
    from testing.in_process import InProcessGrid, train_in_process
    from tests.helpers import DIGITS_PROFILE, unit_clock
    from wire.layout import Layout

    settings = settings_with(
        num_clients=3,
        batch_size=16,
        learning_rate=0.3,
        seed=5,
        model="mlp-bn",
        collective=collective,
        compression_ratio=0.05,
        validation_fraction=0.1,
        batch_norm_statistics="recomputed",
    )
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    validation = server_validation_split(settings)
    assert validation is not None
    layout = Layout.of_model(model)
    strategy = build_strategy(
        settings,
        unit_clock({i: DIGITS_PROFILE for i in range(3)}),
        layout,
        buffer_positions(model),
        STATISTICS[settings.training.batch_norm_statistics](model, validation),
    )
    grid = InProcessGrid(settings)
    rounds = Rounds()
    final = layout.flatten(train_in_process(strategy, settings, model, grid, 3, rounds))
    np.testing.assert_allclose(
        final, recompute_statistics(model, final, validation), rtol=1e-5, atol=1e-6
    )
    assert_replicas_hold_the_model_before_last(strategy, grid, final)
    assert not any(rounds[r].refused for r in range(1, 4))


@pytest.mark.usefixtures("task_identity")
def test_the_diagnosis_records_accuracy_with_recomputed_statistics(tmp_path: Path) -> None:
    """batch-norm-diagnosis: every round's line has the test accuracy with statistics
    recomputed at the evaluated weights and at the previous round's; with the statistics
    recomputed by the server itself, the first equals the accuracy as evaluated."""
    import json

    from commands.run_config import resolve_settings
    from testing.in_process import InProcessGrid, run_server_app

    rows = {}
    for policy in ("averaged", "recomputed"):
        settings = resolve_settings(
            {
                "num-clients": 3,
                "num-server-rounds": 3,
                "model": "mlp-bn",
                "validation-fraction": 0.1,
                "batch-norm-diagnosis": True,
                "batch-norm-statistics": policy,
                "results-dir": str(tmp_path / policy),
            }
        )
        run_server_app(InProcessGrid(settings))
        lines = (tmp_path / policy / "rounds.jsonl").read_text().splitlines()
        rows[policy] = [json.loads(line) for line in lines]
    for row in rows["averaged"] + rows["recomputed"]:
        assert 0.0 <= row["recomputed_accuracy"] <= 1.0
        assert 0.0 <= row["lagged_recomputed_accuracy"] <= 1.0
    averaged = rows["averaged"]
    assert any(r["recomputed_accuracy"] != r["accuracy"] for r in averaged)  # they differ
    for row in rows["recomputed"]:
        assert row["recomputed_accuracy"] == pytest.approx(row["accuracy"], abs=1.5 / 360)
