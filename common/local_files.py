"""Your own labelled data from local files, offline: ``dataset = "KIND:PATH"``.

- ``npz:PATH``: NumPy arrays ``x`` (n, ...) and ``y`` (n,) of integer labels.
- ``csv:PATH`` and ``parquet:PATH``: a column ``label`` (integers) and numeric feature columns,
  read with Hugging Face datasets' local loaders.
- ``imagefolder:DIR``: one sub-directory per class (``DIR/cat/1.png``), read with datasets'
  ``imagefolder`` loader; every image the same size, pixels scaled to [0, 1].

Each loader gives the features flattened to float32 and the sample shape (channels, height,
width) a model is built for. Errors name the file and what is wrong with it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from common.settings import ConfigError
from wire.codec import PayloadError, read_npz

MAX_DATA_BYTES = 1 << 36  # 64 GiB: an array claiming more is refused before it is read
MAX_CLASSES = 1 << 16  # a label this large is a mistake, not a class of a model built here
Shape = tuple[int, int, int]
Loaded = tuple[np.ndarray, np.ndarray, Shape]  # features (n, f) float32, labels (n,), shape
LABEL = "label"


class DataFileError(ConfigError):
    """A local data file that cannot be used; the message names the file."""


def _shape_of(path: Path, sample: tuple[int, ...]) -> Shape:
    shapes: dict[int, Callable[[tuple[int, ...]], Shape]] = {
        1: lambda s: (1, 1, s[0]),
        2: lambda s: (1, s[0], s[1]),
        3: lambda s: (s[0], s[1], s[2]),
    }
    if len(sample) not in shapes:
        raise DataFileError(f"{path}: a sample has shape {sample}; expected 1 to 3 dimensions")
    return shapes[len(sample)](sample)


def _labels(path: Path, y: Any) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataFileError(f"{path}: labels must be integers, one per sample (got {labels.dtype})")
    if labels.size == 0:
        raise DataFileError(f"{path}: no samples")
    if labels.min() < 0:
        raise DataFileError(f"{path}: labels must be >= 0, got {int(labels.min())}")
    if labels.max() >= MAX_CLASSES:
        raise DataFileError(f"{path}: labels must be below {MAX_CLASSES}, got {int(labels.max())}")
    return labels.astype(np.int64)


def _features(path: Path, x: np.ndarray, count: int) -> tuple[np.ndarray, Shape]:
    if x.ndim == 0 or x.shape[0] != count:
        raise DataFileError(f"{path}: features of shape {x.shape} for {count} labels")
    if x.dtype.kind not in "biuf":  # complex numbers would lose their imaginary part
        raise DataFileError(f"{path}: features must be real numbers, got {x.dtype}")
    flat = x.reshape(count, -1).astype(np.float32)
    if not np.isfinite(flat).all():
        raise DataFileError(f"{path}: features hold NaN or infinity")
    return flat, _shape_of(path, tuple(x.shape[1:]))


def load_npz(path: Path) -> Loaded:
    try:
        with zipfile.ZipFile(path) as archive:
            arrays = read_npz(archive, ["x", "y"], MAX_DATA_BYTES)
    except (OSError, ValueError, PayloadError, zipfile.BadZipFile, EOFError) as exc:
        raise DataFileError(f"{path}: cannot read as .npz ({exc})") from exc
    except MemoryError:
        raise DataFileError(f"{path}: its arrays do not fit in this machine's memory") from None
    labels = _labels(path, arrays["y"])
    flat, shape = _features(path, arrays["x"], len(labels))
    return flat, labels, shape


def _hf_local(builder: str, **files: str) -> Any:
    import datasets

    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(builder, split="train", **files)
    except Exception as exc:  # the loaders raise many kinds; the message says which file
        where = next(iter(files.values()))
        raise DataFileError(
            f"{where}: cannot read with datasets' {builder} loader ({exc})"
        ) from exc


def _table(path: Path, builder: str) -> Loaded:
    if not path.is_file():
        raise DataFileError(f"{path}: no such file")
    table = _hf_local(builder, data_files=str(path))
    if LABEL not in table.column_names:
        raise DataFileError(f"{path}: no column {LABEL!r} (columns: {table.column_names})")
    columns = [c for c in table.column_names if c != LABEL]
    if not columns:
        raise DataFileError(f"{path}: no feature columns beside {LABEL!r}")
    frame = table.with_format("numpy")
    labels = _labels(path, frame[LABEL])
    try:
        x = np.stack([np.asarray(frame[c], dtype=np.float64) for c in columns], axis=1)
    except (TypeError, ValueError):
        raise DataFileError(f"{path}: feature columns must be numbers ({columns})") from None
    flat, shape = _features(path, x, len(labels))
    return flat, labels, shape


def load_csv(path: Path) -> Loaded:
    return _table(path, "csv")


def load_parquet(path: Path) -> Loaded:
    return _table(path, "parquet")


def _decode(file: str) -> np.ndarray:
    """One image's pixels; DataFileError naming the file when it is not an image PIL can
    read within its decompression-bomb limit (PIL.Image.MAX_IMAGE_PIXELS)."""
    from PIL import Image

    try:
        with Image.open(file) as image:
            return np.asarray(image, dtype=np.float32)
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise DataFileError(f"{file}: not a readable image ({exc})") from exc


def load_imagefolder(path: Path) -> Loaded:
    if not path.is_dir():
        raise DataFileError(f"{path}: no such directory")
    table = _hf_local("imagefolder", data_dir=str(path))
    if "image" not in table.column_names or LABEL not in table.column_names:
        raise DataFileError(f"{path}: expected one sub-directory per class with images in it")
    import datasets

    # Decoded here, one file at a time, so that a bad file is named.
    files = table.cast_column("image", datasets.Image(decode=False))["image"]
    images = [_decode(file["path"]) for file in files]
    sizes = {image.shape for image in images}
    if len(sizes) != 1:
        raise DataFileError(f"{path}: images differ in size ({sorted(sizes)})")
    stack = np.stack(images) / 255.0
    if stack.ndim == 4:  # height, width, channels -> channels first
        stack = stack.transpose(0, 3, 1, 2)
    labels = _labels(path, np.asarray(table[LABEL]))
    flat, shape = _features(path, stack, len(labels))
    return flat, labels, shape


# KIND in dataset = "KIND:PATH" -> its loader
LOADERS: dict[str, Callable[[Path], Loaded]] = {
    "npz": load_npz,
    "csv": load_csv,
    "parquet": load_parquet,
    "imagefolder": load_imagefolder,
}


def absolute(dataset: str, base: Path) -> str:
    """``dataset`` with a relative file path made absolute against ``base`` (the apps run
    elsewhere: Ray workers, installed app bundles); other names unchanged."""
    kind, sep, path = dataset.partition(":")
    if not sep or kind not in LOADERS or not path or Path(path).expanduser().is_absolute():
        return dataset
    return f"{kind}:{base / path}"


def parse(dataset: str) -> tuple[Callable[[Path], Loaded], Path] | None:
    """The loader and path ``dataset`` names, or None when it names no local file."""
    kind, sep, path = dataset.partition(":")
    if not sep or kind not in LOADERS:
        return None
    if not path:
        raise DataFileError(f"dataset = {dataset!r}: give a path after '{kind}:'")
    return LOADERS[kind], Path(path).expanduser()
