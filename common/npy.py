"""``.npy`` members of an npz archive, read without pickle and checked before allocation.

A header may claim any shape: NumPy allocates what it claims before reading, so a crafted
10^12 x 64 header asks for 512 TB. Here the claim must match the bytes the member holds, and
the member must fit a stated limit, before anything is allocated.
"""

from __future__ import annotations

import zipfile
from typing import IO

import numpy as np

HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def read_member(member: IO[bytes], size: int, name: str) -> np.ndarray:
    """The array in ``member`` (``size`` bytes uncompressed); ValueError naming ``name`` when
    its header is not one NumPy writes, holds Python objects, or claims other than it holds."""
    version = np.lib.format.read_magic(member)
    read_header = HEADER_READERS.get(version)
    if read_header is None:
        raise ValueError(f"{name}: .npy version {version} is not one NumPy writes")
    shape, fortran_order, dtype = read_header(member)
    if dtype.hasobject:
        raise ValueError(f"{name}: an array of Python objects")
    claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
    held = size - member.tell()
    if claimed != held:
        raise ValueError(f"{name}: claims {claimed} bytes of data and holds {held}")
    data = np.frombuffer(bytearray(member.read(claimed)), dtype=dtype)  # writable
    return data.reshape(shape, order="F" if fortran_order else "C")


def read_npz(archive: zipfile.ZipFile, names: list[str], max_bytes: int) -> dict[str, np.ndarray]:
    """The members ``names`` (each ``NAME.npy``) of ``archive``; ValueError naming a missing,
    oversized or malformed one."""
    arrays = {}
    for name in names:
        try:
            info = archive.getinfo(f"{name}.npy")
        except KeyError:
            raise ValueError(f"no array {name!r} (has {archive.namelist()})") from None
        if info.file_size > max_bytes:
            raise ValueError(f"{info.filename}: {info.file_size} bytes, over {max_bytes} allowed")
        with archive.open(info) as member:
            arrays[name] = read_member(member, info.file_size, info.filename)
    return arrays
