"""Synthetic(α, β): generated per client, seeded, heterogeneous as α and β say, and trainable."""

from pathlib import Path

import numpy as np
import pytest

from common import synthetic
from common.data import SYNTHETIC_SPEC, client_partition, data_spec, server_test_split
from common.settings import ConfigError, settings_with
from server.records import read_rounds
from testing.in_process import InProcessGrid, run_server_app


def test_a_client_is_the_same_whatever_else_is_generated() -> None:
    x, y = synthetic.client_samples(1.0, 1.0, seed=7, client=3)
    again_x, again_y = synthetic.client_samples(1.0, 1.0, seed=7, client=3)
    np.testing.assert_array_equal(x, again_x)
    np.testing.assert_array_equal(y, again_y)
    assert x.shape == (len(y), synthetic.NUM_FEATURES) and x.dtype == np.float32
    assert len(y) >= synthetic.MIN_SAMPLES and y.min() >= 0 and y.max() < synthetic.NUM_CLASSES
    other_seed = synthetic.client_samples(1.0, 1.0, seed=8, client=3)[0]
    assert other_seed.shape != x.shape or not np.array_equal(other_seed, x)
    # The data set's partition 1 is client 1's data in a run of 3 clients and in one of 10.
    small, large = (
        settings_with(dataset="synthetic", num_clients=3),
        settings_with(dataset="synthetic", num_clients=10),
    )
    np.testing.assert_array_equal(client_partition(small, 1).x, client_partition(large, 1).x)


def test_beta_spreads_the_clients_data() -> None:
    def feature_mean_spread(beta: float) -> float:
        clients = [synthetic.client_samples(0.0, beta, seed=1, client=k) for k in range(40)]
        return float(np.std([x.mean() for x, _ in clients]))

    assert feature_mean_spread(5.0) > 3 * feature_mean_spread(0.0)


def test_alpha_shifts_every_logit_alike_and_so_leaves_the_labels_as_fedprox_does() -> None:
    """FedProx's generator draws W_k and b_k around one mean u_k ~ N(0, α): that adds
    u_k (sum(x) + 1) to every class's logit alike, so the argmax, the label, is the same for
    any α. Reproduced as published (see the module's docstring)."""
    for client in range(5):
        calm = synthetic.client_samples(0.0, 1.0, seed=2, client=client)
        wild = synthetic.client_samples(10.0, 1.0, seed=2, client=client)
        np.testing.assert_array_equal(calm[1], wild[1])


def test_the_server_tests_on_every_clients_held_out_share() -> None:
    settings = settings_with(dataset="synthetic", num_clients=4, test_fraction=0.25)
    counts = [len(synthetic.client_samples(1.0, 1.0, settings.run.seed, k)[1]) for k in range(4)]
    trained = sum(len(client_partition(settings, k)) for k in range(4))
    test = server_test_split(settings)
    assert trained + len(test) == sum(counts)
    assert len(test) == sum(c - synthetic.split_point(c, 0.25) for c in counts)
    assert data_spec(settings) == SYNTHETIC_SPEC and SYNTHETIC_SPEC.num_features == 60


def test_the_test_split_is_the_first_clients_held_out_share_however_many_there_are() -> None:
    capped = {"dataset": "synthetic", "synthetic_test_clients": 3}
    test = server_test_split(settings_with(num_clients=3, **capped))
    for many in (4, 50):  # clients 3.. train, but the server tests on clients 0..2 alone
        more = server_test_split(settings_with(num_clients=many, **capped))
        np.testing.assert_array_equal(more.x, test.x)
    every = server_test_split(settings_with(num_clients=4, dataset="synthetic"))  # 1000: all 4
    assert len(every) > len(test)
    uncapped = server_test_split(
        settings_with(num_clients=4, **capped | {"synthetic_test_clients": 0})
    )
    np.testing.assert_array_equal(uncapped.y, every.y)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"partitioner": "dirichlet"}, "generated per client"),
        ({"model": "cnn"}, "needs images"),
        ({"synthetic_alpha": -1.0}, "synthetic-alpha must be >= 0"),
    ],
)
def test_settings_that_do_not_fit_synthetic_data_are_refused(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        settings_with(dataset="synthetic", **overrides)


@pytest.mark.usefixtures("task_identity")
def test_a_federation_trains_on_synthetic_data(tmp_path: Path) -> None:
    settings = settings_with(
        dataset="synthetic", num_clients=5, num_server_rounds=6, results_dir=str(tmp_path)
    )
    run_server_app(InProcessGrid(settings))
    rows = read_rounds(tmp_path)
    assert [r["num_clients"] for r in rows] == [5] * 6
    assert rows[-1]["loss"] < rows[0]["loss"]
    test_labels = server_test_split(settings).y
    majority = np.bincount(test_labels).max() / len(test_labels)  # always guessing one label
    assert rows[-1]["accuracy"] > majority + 0.05
