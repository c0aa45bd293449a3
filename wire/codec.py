"""The sparse payload codec shared by clients and the server.

A sparse vector travels as an ArrayRecord with raw little-endian arrays (no .npy header):
``values`` (float32) and either ``indices`` (int32) or ``mask`` (a packed bitmask of the
vector's length), whichever is smaller. Decoding checks everything a malicious or broken
peer could get wrong and raises ``PayloadError`` naming it.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from io import BytesIO

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict
from numpy.typing import NDArray

from wire.keys import INDICES, MASK, NUMPY_STYPE, RAW_STYPE, VALUES

ValuesDecoder = Callable[[ArrayRecord, int], "NDArray[np.float32]"]  # (record, count) -> values


INDEX_ARRAYS = frozenset({INDICES, MASK})  # the arrays an index set travels as


class PayloadError(ValueError):
    """A payload is malformed: missing arrays, wrong dtype or length, bad indices, NaN."""


def topk_count(size: int, ratio: float) -> int:
    """k = ceil(c·d), at least 1 and at most d."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"compression ratio must be in (0, 1], got {ratio}")
    return max(1, min(size, math.ceil(ratio * size)))


def index_nbytes(count: int, size: int) -> int:
    """Bytes of the cheaper index encoding: int32 list or bitmask."""
    return min(4 * count, math.ceil(size / 8))


def raw_array(values: NDArray[np.generic]) -> Array:
    values = np.ascontiguousarray(values)
    return Array(
        dtype=str(values.dtype), shape=tuple(values.shape), stype=RAW_STYPE, data=values.tobytes()
    )


def numpy_array(values: NDArray[np.generic]) -> Array:
    """``Array(values)`` (Flower's ``.npy`` stype, the bytes ``np.save`` writes) for a C-ordered
    array, without ``np.save``'s formatting of a header per call: every round sends the same
    few shapes."""
    values = np.ascontiguousarray(values)
    if values.dtype.hasobject:
        raise ValueError("an array of Python objects has no .npy form without pickle")
    shape = tuple(int(n) for n in values.shape)
    data = _npy_prefix(values.dtype, shape) + values.tobytes()
    return Array(dtype=str(values.dtype), shape=shape, stype=NUMPY_STYPE, data=data)


@lru_cache(maxsize=256)
def _npy_prefix(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The magic, version and header ``np.save`` writes before a C-ordered array's data."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    buffer = BytesIO()
    try:
        np.lib.format.write_array_header_1_0(buffer, header)
    except ValueError:  # a header over 64 KiB: version 2.0, as np.save falls back to
        buffer = BytesIO()
        np.lib.format.write_array_header_2_0(buffer, header)
    return buffer.getvalue()


def short(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: refusals quote what a client sent."""
    return clip(repr(value), limit)


def clip(text: object, limit: int = 80) -> str:
    """``str(text)`` cut to ``limit`` characters."""
    text = str(text)
    return text if len(text) <= limit else f"{text[: limit - 5]}...({len(text)} chars)"


def array_record(content: RecordDict, key: str) -> ArrayRecord:
    """The ArrayRecord ``key`` of a message; PayloadError when it has none."""
    if key not in content.array_records:
        raise PayloadError(f"ArrayRecord {key!r} is missing")
    return content.array_records[key]


def read_raw(record: ArrayRecord, name: str, dtype: str) -> NDArray[np.generic]:
    """A 1-D raw array (this codec's own stype), checked before its bytes are read."""
    if name not in record:
        raise PayloadError(f"array {name!r} is missing")
    array = record[name]
    if array.stype != RAW_STYPE:
        raise PayloadError(f"array {name!r} has stype {clip(array.stype)}, expected {RAW_STYPE}")
    if array.dtype != dtype:
        raise PayloadError(f"array {name!r} has dtype {clip(array.dtype)}, expected {dtype}")
    if len(array.shape) != 1:
        raise PayloadError(f"array {name!r} has shape {clip(tuple(array.shape))}, expected 1-D")
    expected = int(array.shape[0]) * np.dtype(dtype).itemsize
    if len(array.data) != expected:
        raise PayloadError(f"array {name!r} carries {len(array.data)} bytes, expected {expected}")
    return np.frombuffer(array.data, dtype=np.dtype(dtype).newbyteorder("<"))


_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}
_NPY_MAGIC_BYTES = 8  # b"\x93NUMPY", then the major and minor version
_NPY_LENGTH_BYTES = {(1, 0): 2, (2, 0): 4}  # the header's length field, little-endian

NpyHeader = tuple[tuple[int, ...], bool, np.dtype]  # shape, Fortran order, dtype


@lru_cache(maxsize=256)
def _npy_header(version: tuple[int, int], header: bytes) -> NpyHeader:
    """NumPy's own reading of a header (its length field, then the text): kept, since every
    round's arrays repeat a few headers and NumPy parses each with ``ast.literal_eval`` (most
    of a dense reply's checks, profiled). A header NumPy refuses raises each time."""
    shape, fortran_order, dtype = _NPY_HEADERS[version](BytesIO(header))
    return shape, fortran_order, dtype


def read_npy(data: bytes | bytearray, name: str) -> NDArray[np.generic]:
    """The ``.npy`` array ``data`` holds, checked before anything is allocated: a header NumPy
    writes, no Python objects, and exactly the data bytes the header claims (a header may claim
    any shape, and NumPy would allocate it before reading). ``PayloadError`` names ``name`` and
    what is wrong. A view of ``data`` (read-only for bytes). The one reader of ``.npy`` bytes:
    a message's arrays (``load_numpy``) and the arrays of a state file (``state/archive.py``)."""
    try:
        version = np.lib.format.read_magic(BytesIO(data[:_NPY_MAGIC_BYTES]))
        length_bytes = _NPY_LENGTH_BYTES[version]
        length = _NPY_MAGIC_BYTES + length_bytes
        end = length + int.from_bytes(data[_NPY_MAGIC_BYTES:length], "little")
        if len(data) < end:
            raise ValueError("the header runs past the data")
        shape, fortran_order, dtype = _npy_header(version, bytes(data[_NPY_MAGIC_BYTES:end]))
    except Exception:  # anything unreadable: not a .npy array this codec accepts
        raise PayloadError(f"array {name!r} has no readable .npy header") from None
    if dtype.hasobject:
        raise PayloadError(f"array {name!r} holds Python objects")
    claimed = math.prod(shape) * dtype.itemsize
    held = len(data) - end
    if claimed != held:
        raise PayloadError(f"array {name!r} carries {held} data bytes, expected {claimed}")
    values = np.frombuffer(data, dtype=dtype, offset=end)
    return values.reshape(shape, order="F" if fortran_order else "C")


def read_npz(
    archive: zipfile.ZipFile, names: list[str], max_bytes: int
) -> dict[str, NDArray[np.generic]]:
    """The arrays ``names`` of an ``.npz`` (members ``NAME.npy``), each read with ``read_npy``;
    PayloadError naming a missing one or one of more than ``max_bytes``."""
    arrays = {}
    for name in names:
        try:
            info = archive.getinfo(f"{name}.npy")
        except KeyError:
            raise PayloadError(f"no array {name!r} (has {archive.namelist()})") from None
        if info.file_size > max_bytes:
            raise PayloadError(f"{info.filename}: {info.file_size} bytes, over {max_bytes}")
        arrays[name] = read_npy(archive.read(info), info.filename)
    return arrays


def load_numpy(
    array: Array, name: str, dtype: str, shapes: tuple[tuple[int, ...], ...] | None = None
) -> NDArray[np.generic]:
    """A numpy-serialized Array (Flower's stype), checked before anything is allocated: its
    metadata and its .npy header must name ``dtype`` and one of ``shapes`` (default: the
    metadata's shape), and the data must be exactly that many elements."""
    if array.stype != NUMPY_STYPE:
        raise PayloadError(f"array {name!r} has stype {clip(array.stype)}, expected {NUMPY_STYPE}")
    shape = tuple(int(n) for n in array.shape)
    if array.dtype != dtype:
        raise PayloadError(f"array {name!r} has dtype {clip(array.dtype)}, expected {dtype}")
    if shapes is not None and shape not in shapes:
        allowed = " or ".join(str(s) for s in shapes)
        raise PayloadError(f"array {name!r} has shape {clip(shape)}, expected {allowed}")
    values = read_npy(array.data, name)
    if (
        values.shape != shape
        or values.dtype != np.dtype(dtype)
        or values.ndim > 1
        and not (values.flags.c_contiguous)
    ):
        raise PayloadError(
            f"array {name!r}: its header says {values.dtype} {short(values.shape)}, "
            f"its metadata {dtype} {short(shape)}"
        )
    return values


def encode_indices(indices: NDArray[np.int64], size: int) -> tuple[str, Array]:
    """Sorted unique ``indices`` of a ``size``-vector as int32 or a bitmask, the smaller."""
    if 4 * indices.size <= math.ceil(size / 8):
        return INDICES, raw_array(indices.astype("<i4"))
    mask = np.zeros(size, dtype=bool)
    mask[indices] = True
    return MASK, raw_array(np.packbits(mask))


def decode_indices(record: ArrayRecord, size: int) -> NDArray[np.int64]:
    """Indices from ``indices`` (as sent) or ``mask`` (ascending); no out-of-range or duplicates."""
    if INDICES in record and MASK in record:
        raise PayloadError("both 'indices' and 'mask' are present")
    if MASK in record:
        packed = read_raw(record, MASK, "uint8")
        if packed.size != math.ceil(size / 8):
            raise PayloadError(f"mask has {packed.size} bytes, expected {math.ceil(size / 8)}")
        bits = np.unpackbits(packed.astype(np.uint8))
        if bits[size:].any():
            raise PayloadError("mask sets bits beyond the vector's length (index out of range)")
        return np.flatnonzero(bits[:size]).astype(np.int64)
    if INDICES not in record:
        raise PayloadError("neither 'indices' nor 'mask' is present")
    if record[INDICES].dtype not in ("int32", "int64"):
        raise PayloadError(f"indices have dtype {record[INDICES].dtype}, expected integers (int32)")
    indices = read_raw(record, INDICES, record[INDICES].dtype).astype(np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        raise PayloadError(f"indices out of range 0..{size - 1}")
    ordered = np.sort(indices)
    if ordered.size > 1 and np.any(ordered[1:] == ordered[:-1]):
        raise PayloadError("indices are duplicated")
    return indices  # in the order sent: values, if any, pair with them


def decode_values(record: ArrayRecord, count: int) -> NDArray[np.float32]:
    values = read_raw(record, VALUES, "float32").astype(np.float32, copy=False)
    if values.size != count:
        raise PayloadError(f"{values.size} values, expected {count}")
    if not np.all(np.isfinite(values)):
        raise PayloadError("values contain NaN or infinite entries")
    return values


@dataclass(frozen=True)
class Sparse:
    """A sparse vector of length ``size``: ``values`` at sorted ``indices``."""

    indices: NDArray[np.int64]
    values: NDArray[np.float32]
    size: int

    def to_record(self) -> ArrayRecord:
        return sparse_record(
            self.indices, self.size, {VALUES: raw_array(self.values.astype("<f4"))}
        )

    @classmethod
    def from_record(
        cls,
        record: ArrayRecord,
        size: int,
        count: int | None = None,
        values_of: ValuesDecoder | None = None,
    ) -> Sparse:
        """Decode; ``count`` (when given) is the exact number of entries expected;
        ``values_of`` reads the values (default: float32 ``values``)."""
        indices = decode_indices(record, size)
        if count is not None and indices.size != count:
            raise PayloadError(f"{indices.size} indices, expected {count}")
        values = (values_of or decode_values)(record, indices.size)
        order = np.argsort(indices, kind="stable")
        if not np.array_equal(order, np.arange(order.size)):
            indices, values = indices[order], values[order]
        return cls(indices=indices, values=values, size=size)

    def dense(self) -> NDArray[np.float32]:
        out = np.zeros(self.size, dtype=np.float32)
        out[self.indices] = self.values
        return out

    def apply_to(self, model: NDArray[np.float32]) -> NDArray[np.float32]:
        """model + this vector, as a new array (clients apply exactly this to their replicas)."""
        out = model.copy()
        out[self.indices] += self.values
        return out


def sparse_record(indices: NDArray[np.int64], size: int, values: dict[str, Array]) -> ArrayRecord:
    """Encoded values (a compressor's arrays) with their indices, in the smaller encoding."""
    kind, encoded = encode_indices(indices, size)
    return ArrayRecord({**values, kind: encoded})


def values_record(values: NDArray[np.float32]) -> ArrayRecord:
    return ArrayRecord({VALUES: raw_array(values.astype("<f4"))})


def indices_record(indices: NDArray[np.int64], size: int) -> ArrayRecord:
    kind, encoded = encode_indices(indices, size)
    return ArrayRecord({kind: encoded})
