"""Your own data from local files: npz, csv, parquet and image folders, offline."""

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from commands.run_config import resolve_settings
from common.data import client_partition, data_spec, server_test_split
from common.local_files import DataFileError, absolute, load_csv, load_imagefolder, load_npz
from common.settings import ConfigError, settings_with
from server.records import read_rounds
from testing.in_process import InProcessGrid, run_server_app

RNG = np.random.default_rng(0)


def _blobs(n: int = 120, features: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated classes."""
    y = np.arange(n) % 3
    x = RNG.normal(0.0, 0.15, (n, features)) + y[:, None] * 1.0
    return x.astype(np.float32), y.astype(np.int64)


def _npz(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "data.npz"
    np.savez(path, **arrays)
    return path


def _csv(tmp_path: Path, header: str, rows: list[str]) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def _imagefolder(tmp_path: Path, sizes: tuple[int, ...] = (8, 8, 8, 8)) -> Path:
    root = tmp_path / "images"
    for label, size in zip(("cat", "cat", "dog", "dog"), sizes, strict=True):
        (root / label).mkdir(parents=True, exist_ok=True)
        pixels = RNG.integers(0, 255, (size, size), dtype=np.uint8)
        Image.fromarray(pixels, mode="L").save(root / label / f"{len(list(root.rglob('*')))}.png")
    return root


def _huge_npz(tmp_path: Path) -> Path:
    """An npz whose ``x`` header claims 10^12 x 64 floats (and holds none)."""
    path = tmp_path / "data.npz"
    header = io.BytesIO()
    np.lib.format.write_array_header_2_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**12, 64)}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", header.getvalue())
        y = io.BytesIO()
        np.lib.format.write_array(y, np.zeros(2, dtype=np.int64))
        archive.writestr("y.npy", y.getvalue())
    return path


def _bad_image(tmp_path: Path, content: bytes) -> Path:
    root = _imagefolder(tmp_path)
    (root / "dog" / "bad.png").write_bytes(content)
    return root


def _bomb() -> bytes:
    """A small PNG of more pixels than PIL's decompression-bomb limit allows (2x)."""
    out = io.BytesIO()
    side = int((2 * Image.MAX_IMAGE_PIXELS) ** 0.5) + 2
    Image.new("1", (side, side)).save(out, format="PNG")
    return out.getvalue()


def test_each_kind_of_file_gives_features_labels_and_the_sample_shape(tmp_path: Path) -> None:
    x, y = _blobs()
    loaded_x, loaded_y, shape = load_npz(_npz(tmp_path, x=x.reshape(-1, 2, 3), y=y))
    np.testing.assert_array_equal(loaded_x, x)
    np.testing.assert_array_equal(loaded_y, y)
    assert shape == (1, 2, 3)
    csv_x, csv_y, csv_shape = load_csv(_csv(tmp_path, "a,b,label", ["1,2.5,0", "3,4,2"]))
    np.testing.assert_array_equal(csv_x, [[1.0, 2.5], [3.0, 4.0]])
    assert list(csv_y) == [0, 2] and csv_shape == (1, 1, 2)
    img_x, img_y, img_shape = load_imagefolder(_imagefolder(tmp_path))
    assert img_shape == (1, 8, 8) and img_x.shape == (4, 64)
    assert sorted(img_y) == [0, 0, 1, 1] and img_x.min() >= 0.0 and img_x.max() <= 1.0


def test_parquet_is_read_like_csv(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"f": [0.5, 1.5, 2.5], "label": [1, 0, 1]}), path)
    settings = settings_with(dataset=f"parquet:{path}", num_clients=1)
    assert data_spec(settings).image_shape == (1, 1, 1) and data_spec(settings).num_classes == 2


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: f"npz:{_npz(tmp, x=np.zeros((3, 2)))}", r"data.npz: .*\(no array 'y'"),
        (lambda tmp: f"npz:{_huge_npz(tmp)}", "carries 0 data bytes, expected 512000000000000"),
        (lambda tmp: f"npz:{_npz(tmp, x=np.float32(1), y=np.array([0]))}", r"shape \(\) for 1"),
        (
            lambda tmp: f"npz:{_npz(tmp, x=np.ones((2, 2), complex), y=np.array([0, 1]))}",
            "features must be real numbers, got complex128",
        ),
        (
            lambda tmp: f"npz:{_npz(tmp, x=np.zeros((2, 2)), y=np.array([0, 2**40]))}",
            "labels must be below 65536, got 1099511627776",
        ),
        (lambda tmp: f"imagefolder:{_bad_image(tmp, b'not a png')}", r"dog/bad.png: not a read"),
        (lambda tmp: f"imagefolder:{_bad_image(tmp, _bomb())}", r"dog/bad.png: .*decompression"),
        (
            lambda tmp: f"npz:{_npz(tmp, x=np.zeros((3, 2)), y=np.array([0.5, 1, 2]))}",
            "labels must be integers",
        ),
        (
            lambda tmp: f"npz:{_npz(tmp, x=np.full((2, 2), np.nan), y=np.array([0, 1]))}",
            "NaN or infinity",
        ),
        (lambda tmp: f"csv:{_csv(tmp, 'a,b', ['1,2'])}", "data.csv: no column 'label'"),
        (lambda tmp: f"csv:{_csv(tmp, 'a,label', ['x,0'])}", "feature columns must be numbers"),
        (lambda tmp: f"csv:{tmp / 'none.csv'}", "none.csv: no such file"),
        (lambda tmp: f"imagefolder:{_imagefolder(tmp, (8, 8, 8, 6))}", "images differ in size"),
        (lambda tmp: "npz:", "give a path after 'npz:'"),
    ],
)
def test_a_bad_file_is_refused_naming_it_before_anything_starts(
    tmp_path: Path, make: object, message: str
) -> None:
    dataset = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(DataFileError, match=message):
        resolve_settings({"dataset": dataset, "num-clients": 2})
    assert issubclass(DataFileError, ConfigError)  # the launchers print it and exit 2


def test_a_relative_path_is_made_absolute_for_the_apps(tmp_path: Path) -> None:
    assert absolute("npz:data/x.npz", tmp_path) == f"npz:{tmp_path / 'data/x.npz'}"
    assert absolute("npz:/abs/x.npz", tmp_path) == "npz:/abs/x.npz"
    assert absolute("digits", tmp_path) == "digits"
    assert absolute("user/hub-name", tmp_path) == "user/hub-name"


def test_the_cnn_is_refused_for_samples_that_are_no_image(tmp_path: Path) -> None:
    x, y = _blobs()
    with pytest.raises(ConfigError, match="'cnn' needs images"):
        resolve_settings({"dataset": f"npz:{_npz(tmp_path, x=x, y=y)}", "model": "cnn"})


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("kind", ["npz", "csv", "imagefolder"])
def test_a_federation_trains_on_your_own_files(tmp_path: Path, kind: str) -> None:
    x, y = _blobs()
    if kind == "npz":
        dataset = f"npz:{_npz(tmp_path, x=x, y=y)}"
    elif kind == "csv":
        rows = [
            ",".join(f"{v:.4f}" for v in row) + f",{label}" for row, label in zip(x, y, strict=True)
        ]
        dataset = f"csv:{_csv(tmp_path, 'a,b,c,d,e,f,label', rows)}"
    else:
        dataset = f"imagefolder:{_imagefolder(tmp_path)}"
    settings = settings_with(
        dataset=dataset,
        num_clients=2,
        num_server_rounds=6,
        local_steps=5,
        learning_rate=0.2,
        results_dir=str(tmp_path / "run"),
    )
    samples = 4 if kind == "imagefolder" else len(y)
    held = len(server_test_split(settings))
    assert sum(len(client_partition(settings, k)) for k in range(2)) + held == samples
    run_server_app(InProcessGrid(settings))
    rows = read_rounds(tmp_path / "run")
    assert [r["num_clients"] for r in rows] == [2] * 6
    if kind != "imagefolder":  # random pixels: nothing to learn, only that it runs
        assert rows[-1]["loss"] < 0.7 * rows[0]["loss"]  # it learns ...
        assert rows[-1]["accuracy"] > 0.5  # ... three separated blobs (chance: 1/3)
