"""Data: bundled digits, generated Synthetic(α, β) (or a Hugging Face dataset), the server's
test split, client partitions.

Digits: the held-out test split stays at the server; the rest is partitioned over the clients
with flwr-datasets partitioners on an in-memory ``datasets.Dataset``. Synthetic: each client's
data is generated for it (``common.synthetic``); the server tests on every client's held-out
share.

scikit-learn, ``datasets`` and flwr-datasets are imported where a split is made, not with this
module: on a device every message starts a fresh ClientApp process, which needs the data
types on every call but makes its partition only once (then keeps it in ``context.state``);
the three imports cost seconds (flwr-datasets pulls in plotting libraries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from common import local_files, synthetic
from common.settings import Settings

if TYPE_CHECKING:
    from datasets import Dataset
    from flwr_datasets.partitioner import Partitioner

DIGITS = "digits"


@dataclass(frozen=True)
class DataSpec:
    """Shape of one sample and the number of classes: what a model needs to be built."""

    image_shape: tuple[int, int, int]  # channels, height, width
    num_classes: int

    @property
    def num_features(self) -> int:
        c, h, w = self.image_shape
        return c * h * w


@dataclass(frozen=True)
class ArrayData:
    """Features as float32 ``(n, num_features)`` and labels as int64 ``(n,)``."""

    x: NDArray[np.float32]
    y: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.y.shape[0])


DIGITS_SPEC = DataSpec(image_shape=(1, 8, 8), num_classes=10)


def _digits() -> ArrayData:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    # Pixel intensities are 0..16; scale to [0, 1] so a plain SGD step size works.
    x = (np.asarray(bunch.data, dtype=np.float32) / 16.0).astype(np.float32)
    return ArrayData(x=x, y=np.asarray(bunch.target, dtype=np.int64))


def _split(settings: Settings, data: ArrayData) -> tuple[ArrayData, ArrayData]:
    """Seeded split into (train, test), stratified where every label has two samples."""
    from sklearn.model_selection import train_test_split

    classes = np.unique(data.y)
    held = int(np.ceil(settings.test_fraction * len(data)))
    fits = min(held, len(data) - held) >= len(classes)  # each side can hold every label
    stratify = data.y if fits and np.bincount(data.y)[classes].min() >= 2 else None
    x_train, x_test, y_train, y_test = train_test_split(
        data.x,
        data.y,
        test_size=settings.test_fraction,
        random_state=settings.seed,
        stratify=stratify,
    )
    return ArrayData(x_train, y_train), ArrayData(x_test, y_test)


def split_train_test(settings: Settings) -> tuple[ArrayData, ArrayData]:
    """Stratified, seeded split of the bundled digits into (train, test)."""
    return _split(settings, _digits())


def _partition(settings: Settings, data: ArrayData, partition_id: int) -> ArrayData:
    """Partition ``partition_id`` of the training part of ``data``."""
    train, _ = _split(settings, data)
    partitioner = make_partitioner(settings)
    partitioner.dataset = _to_dataset(train)
    part = partitioner.load_partition(partition_id).with_format("numpy")
    if len(part) == 0:
        raise ValueError(
            f"partition {partition_id} is empty with partitioner={settings.partitioner!r} "
            f"and num-clients={settings.num_clients}"
        )
    return ArrayData(
        x=np.asarray(part["x"], dtype=np.float32), y=np.asarray(part["label"], dtype=np.int64)
    )


def _synthetic_split(settings: Settings, client: int) -> tuple[ArrayData, ArrayData]:
    x, y = synthetic.client_samples(
        settings.synthetic_alpha, settings.synthetic_beta, settings.seed, client
    )
    cut = synthetic.split_point(len(y), settings.test_fraction)
    return ArrayData(x[:cut], y[:cut]), ArrayData(x[cut:], y[cut:])


def _synthetic_test(settings: Settings) -> ArrayData:
    parts = [_synthetic_split(settings, k)[1] for k in range(settings.num_clients)]
    return ArrayData(np.concatenate([p.x for p in parts]), np.concatenate([p.y for p in parts]))


@dataclass(frozen=True)
class LocalDataset:
    """A data set made on this machine: its sample shape, a client's training data, and the
    server's test set."""

    spec: DataSpec
    partition: Callable[[Settings, int], ArrayData]
    server_test: Callable[[Settings], ArrayData]


SYNTHETIC = "synthetic"
SYNTHETIC_SPEC = DataSpec(
    image_shape=(1, 1, synthetic.NUM_FEATURES), num_classes=synthetic.NUM_CLASSES
)
# dataset -> how it is made; any other name is a Hugging Face dataset
LOCAL_DATASETS: dict[str, LocalDataset] = {
    DIGITS: LocalDataset(
        DIGITS_SPEC, lambda s, k: _partition(s, _digits(), k), lambda s: split_train_test(s)[1]
    ),
    SYNTHETIC: LocalDataset(
        SYNTHETIC_SPEC, lambda s, k: _synthetic_split(s, k)[0], _synthetic_test
    ),
}


def _file_dataset(dataset: str) -> LocalDataset | None:
    """``dataset = "KIND:PATH"`` (``common.local_files``); None: no local file kind."""
    parsed = local_files.parse(dataset)
    if parsed is None:
        return None
    load, path = parsed
    x, y, shape = load(path)
    data = ArrayData(x, y)
    return LocalDataset(
        DataSpec(shape, int(y.max()) + 1),
        lambda s, k: _partition(s, data, k),
        lambda s: _split(s, data)[1],
    )


_FILE_DATASETS: dict[str, LocalDataset | None] = {}  # a file is read once per process


def _local(dataset: str) -> LocalDataset | None:
    """The data set made on this machine that ``dataset`` names; None: a hub name."""
    if dataset in LOCAL_DATASETS:
        return LOCAL_DATASETS[dataset]
    if dataset not in _FILE_DATASETS:
        _FILE_DATASETS[dataset] = _file_dataset(dataset)
    return _FILE_DATASETS[dataset]


def is_made_here(dataset: str) -> bool:
    """True unless ``dataset`` names a Hugging Face hub data set (fetched, not made here)."""
    return _local(dataset) is not None


def data_spec(settings: Settings) -> DataSpec:
    local = _local(settings.dataset)
    return _hub_spec(settings.dataset) if local is None else local.spec


def server_test_split(settings: Settings) -> ArrayData:
    """The centralized evaluation set kept at the server."""
    local = _local(settings.dataset)
    return _hub_split(settings.dataset, "test") if local is None else local.server_test(settings)


def _iid(settings: Settings) -> Partitioner:
    from flwr_datasets.partitioner import IidPartitioner

    return IidPartitioner(num_partitions=settings.num_clients)


def _dirichlet(settings: Settings) -> Partitioner:
    from flwr_datasets.partitioner import DirichletPartitioner

    return DirichletPartitioner(
        num_partitions=settings.num_clients,
        partition_by="label",
        alpha=settings.dirichlet_alpha,
        min_partition_size=1,
        self_balancing=True,
        seed=settings.seed,
    )


def _labels(settings: Settings) -> Partitioner:
    from flwr_datasets.partitioner import PathologicalPartitioner

    return PathologicalPartitioner(
        num_partitions=settings.num_clients,
        partition_by="label",
        num_classes_per_partition=settings.labels_per_client,
        class_assignment_mode="first-deterministic",
        seed=settings.seed,
    )


# partitioner -> the flwr-datasets partitioner (imported when a split is made)
PARTITIONERS: dict[str, Callable[[Settings], Partitioner]] = {
    "iid": _iid,
    "dirichlet": _dirichlet,
    "labels": _labels,
}


def make_partitioner(settings: Settings) -> Partitioner:
    """The flwr-datasets partitioner that ``partitioner`` names."""
    return PARTITIONERS[settings.partitioner](settings)


def client_partition(settings: Settings, partition_id: int) -> ArrayData:
    """Training data of client ``partition_id`` (0-based)."""
    if not 0 <= partition_id < settings.num_clients:
        raise ValueError(
            f"partition-id {partition_id} is outside 0..{settings.num_clients - 1} "
            f"(num-clients = {settings.num_clients})"
        )
    local = _local(settings.dataset)
    if local is None:
        return _hub_partition(settings, partition_id)
    return local.partition(settings, partition_id)


def _to_dataset(data: ArrayData) -> Dataset:
    import datasets
    from datasets import ClassLabel, Dataset

    # Partitioning a few thousand rows in memory needs no progress bar on every client call.
    datasets.disable_progress_bars()
    ds = Dataset.from_dict({"x": data.x, "label": data.y})
    return ds.cast_column("label", ClassLabel(num_classes=int(data.y.max()) + 1))


# --- Hugging Face datasets: only where the hub is reachable --------------------------------


class HubUnavailableError(RuntimeError):
    """The Hugging Face Hub cannot be reached, so a hub dataset cannot be loaded."""


def _require_hub(name: str) -> None:
    """Fail fast (seconds, not a long retry loop) when the hub is unreachable."""
    import huggingface_hub

    try:
        huggingface_hub.HfApi().dataset_info(name, timeout=5.0)
    except Exception as exc:  # offline mode, DNS failure, timeout, unknown repo
        raise HubUnavailableError(
            f"dataset = {name!r} needs the Hugging Face Hub, which cannot be reached "
            f'({type(exc).__name__}: {exc}). Use dataset = "{DIGITS}", which ships with '
            "scikit-learn, or run where the hub is reachable."
        ) from exc


def _hub_federated(settings: Settings):  # type: ignore[no-untyped-def]
    from flwr_datasets import FederatedDataset

    _require_hub(settings.dataset)
    return FederatedDataset(
        dataset=settings.dataset,
        partitioners={"train": make_partitioner(settings)},
        seed=settings.seed,
    )


def _image_arrays(ds: Dataset) -> ArrayData:
    """Images in column ``image`` (or ``img``) and labels in ``label``, scaled to [0, 1]."""
    key = "image" if "image" in ds.column_names else "img"
    x = np.stack([np.asarray(img, dtype=np.float32).reshape(-1) / 255.0 for img in ds[key]])
    return ArrayData(x=x.astype(np.float32), y=np.asarray(ds["label"], dtype=np.int64))


def _hub_partition(settings: Settings, partition_id: int) -> ArrayData:
    return _image_arrays(_hub_federated(settings).load_partition(partition_id, "train"))


def _hub_split(name: str, split: str) -> ArrayData:
    from datasets import load_dataset

    _require_hub(name)
    return _image_arrays(load_dataset(name, split=split))


def _hub_spec(name: str) -> DataSpec:
    """Infer a square grey (1 channel) or colour (3 channel) image shape from one test sample."""
    test = _hub_split(name, "test")
    size = int(test.x[0].size)
    channels = 1 if round(np.sqrt(size)) ** 2 == size else 3
    side = int(round(np.sqrt(size / channels)))
    return DataSpec(image_shape=(channels, side, side), num_classes=int(test.y.max()) + 1)
