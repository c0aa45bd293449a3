import time

import numpy as np
import pytest

from common.data import HubUnavailableError, client_partition, server_test_split, split_train_test
from common.settings import settings_with


def _rows(data) -> set[bytes]:  # type: ignore[no-untyped-def]
    return {row.tobytes() + bytes([label]) for row, label in zip(data.x, data.y, strict=True)}


def test_test_split_is_held_out_and_stratified() -> None:
    settings = settings_with(test_fraction=0.2)
    train, test = split_train_test(settings)
    assert len(train) + len(test) == 1797
    assert len(test) == 360
    assert set(np.unique(test.y)) == set(range(10))
    np.testing.assert_array_equal(server_test_split(settings).y, test.y)


def test_iid_partitions_cover_the_training_set_once() -> None:
    settings = settings_with(num_clients=5, partitioner="iid")
    train, _ = split_train_test(settings)
    parts = [client_partition(settings, i) for i in range(5)]
    assert sum(len(p) for p in parts) == len(train)
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert all(p.x.dtype == np.float32 and p.y.dtype == np.int64 for p in parts)
    assert all(len(set(p.y.tolist())) == 10 for p in parts)


def test_labels_partitioner_gives_each_client_its_labels() -> None:
    settings = settings_with(num_clients=10, partitioner="labels", labels_per_client=1)
    labels = [set(client_partition(settings, i).y.tolist()) for i in range(10)]
    assert all(len(s) == 1 for s in labels)
    assert set().union(*labels) == set(range(10))  # ScaDLES: 10 devices, one label each


def test_dirichlet_is_seeded_and_skewed() -> None:
    a = settings_with(num_clients=5, partitioner="dirichlet", dirichlet_alpha=0.1, seed=3)
    b = settings_with(num_clients=5, partitioner="dirichlet", dirichlet_alpha=0.1, seed=3)
    np.testing.assert_array_equal(client_partition(a, 2).y, client_partition(b, 2).y)
    counts = np.bincount(client_partition(a, 2).y, minlength=10)
    assert counts.max() > 3 * np.median(counts)  # far from uniform at alpha = 0.1


def test_partition_id_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="partition-id 4 is outside 0..3"):
        client_partition(settings_with(num_clients=4), 4)


@pytest.mark.usefixtures("no_hub")
def test_hub_dataset_fails_fast_when_the_hub_is_unreachable() -> None:
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match="dataset = 'ylecun/mnist' is not a local"):
        client_partition(settings_with(dataset="ylecun/mnist"), 0)
    assert time.monotonic() - start < 30
