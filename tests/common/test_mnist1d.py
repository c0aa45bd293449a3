"""MNIST-1D as a built-in workload: the package's published split, generated here, and the
MNIST-1D paper's models."""

import random

import numpy as np
import pytest
import torch

from common.data import (
    MNIST1D_SPEC,
    client_partition,
    data_spec,
    mnist1d_split,
    server_test_split,
)
from common.models import build_model, num_parameters
from common.params import buffer_positions
from common.settings import settings_with


def test_the_published_split_is_4000_train_and_1000_test() -> None:
    settings = settings_with(dataset="mnist1d")
    train, test = mnist1d_split(settings)
    assert (train.x.shape, test.x.shape) == ((4000, 40), (1000, 40))
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert set(np.unique(test.y)) == set(range(10))
    assert data_spec(settings) == MNIST1D_SPEC
    np.testing.assert_array_equal(server_test_split(settings).x, test.x)


def test_the_data_is_the_same_for_every_run_seed_and_leaves_global_generators_alone() -> None:
    random.seed(1)
    np.random.seed(1)
    expected = (random.random(), np.random.random())
    random.seed(1)
    np.random.seed(1)
    a, _ = mnist1d_split(settings_with(dataset="mnist1d", mnist1d_samples=600, seed=3))
    assert (random.random(), np.random.random()) == expected
    b, _ = mnist1d_split(settings_with(dataset="mnist1d", mnist1d_samples=600, seed=9))
    np.testing.assert_array_equal(a.x, b.x)


def test_more_samples_give_a_larger_test_split() -> None:
    _, test = mnist1d_split(settings_with(dataset="mnist1d", mnist1d_samples=1500))
    assert len(test) == 300


def test_partitions_cover_the_training_split_once() -> None:
    settings = settings_with(dataset="mnist1d", num_clients=4, mnist1d_samples=600)
    train, _ = mnist1d_split(settings)
    parts = [client_partition(settings, i) for i in range(4)]
    assert sum(len(p) for p in parts) == len(train) == 480
    rows = {row.tobytes() for p in parts for row in p.x}
    assert rows == {row.tobytes() for row in train.x}


@pytest.mark.parametrize(
    ("name", "parameters", "buffers"),
    [("mlp100", 15_210, 0), ("cnn1d", 5_210, 0), ("cnn1d-bn", 5_360, 153), ("cnn1d-gn", 5_360, 0)],
)
def test_the_papers_models_fit_the_signals(name: str, parameters: int, buffers: int) -> None:
    """15,210 and 5,210 parameters: the MNIST-1D paper's MLP and CNN; the norm variants add a
    scale and a shift per channel, batch norm also running statistics and counters."""
    model = build_model(name, MNIST1D_SPEC, seed=0)
    assert num_parameters(model) == parameters
    assert buffer_positions(model).size == buffers
    logits = model(torch.zeros(8, MNIST1D_SPEC.num_features))
    assert logits.shape == (8, 10)
