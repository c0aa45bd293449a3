"""The one file format of state on disk: checkpoints, clients' saved states, a device's state
and the state store's vectors.

A file is a zip archive, stored, not compressed (NumPy's npz layout): one ``.npy`` member per
array, read without pickle (``wire.codec.read_npy``: checked before anything is allocated), and
``manifest.json``: the layout's version, the kind of file, its parts (each a tree of plain
numbers, strings, lists and mappings with ``{"$array": name}`` where an array goes, and each
with the schema version its ``state_dict`` wrote) and a SHA-256 of all of it (no key: it
catches a damaged or edited copy; what keeps a crafted file harmless is that nothing in it
chooses code). Reading checks everything and raises ``StateError`` naming the file and what is
wrong: not an archive, truncated, a member compressed or unknown, an array nobody reads or one
missing, another kind of file, another version of the layout.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import typing
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.typing import NDArray

from state.files import atomic_write
from wire.codec import PayloadError, read_npy

LAYOUT = 1  # of the archive itself (each part has a schema version of its own)
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 30
ZIP_MAGIC = b"PK\x03\x04"
ARRAY = "$array"
MEMBER = re.compile(r"^a\d+\.npy$")

Tree = Any  # plain JSON values, with {"$array": name} in place of arrays


class StateError(ValueError):
    """State that cannot be written or read back; the message names the file, part and field."""


def _pack(value: Any, arrays: dict[str, NDArray[Any]], where: str) -> Tree:
    """``value`` as a JSON tree, its arrays moved to ``arrays`` (named a0, a1, ...)."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise StateError(f"{where}: an array of Python objects")
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {ARRAY: name}
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise StateError(f"{where}: a mapping whose keys are not all strings")
        return {k: _pack(v, arrays, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_pack(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.integer | np.floating | np.bool_):
        return value.item()
    raise StateError(f"{where}: {type(value).__name__} is not state data")


def _unpack(tree: Tree, arrays: dict[str, NDArray[Any]], used: set[str], where: str) -> Any:
    if isinstance(tree, dict):
        if ARRAY in tree:
            name = tree[ARRAY]
            if set(tree) != {ARRAY} or not isinstance(name, str) or name not in arrays:
                raise StateError(f"{where}: {tree!r} names no array of the file")
            if name in used:
                raise StateError(f"{where}: array {name!r} is read twice")
            used.add(name)
            return arrays[name]
        return {k: _unpack(v, arrays, used, f"{where}.{k}") for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unpack(v, arrays, used, f"{where}[{i}]") for i, v in enumerate(tree)]
    return tree


def _digest(manifest: Mapping[str, Any], arrays: Mapping[str, NDArray[Any]]) -> str:
    digest = hashlib.sha256()
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    digest.update(json.dumps(body, sort_keys=True).encode())
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key} {array.dtype.str} {array.shape}".encode())
        if array.size:  # its buffer, not a copy (an empty one cannot be cast)
            digest.update(array.data.cast("B"))
    return digest.hexdigest()


def flatten(parts: Mapping[str, Any]) -> tuple[Tree, dict[str, NDArray[Any]]]:
    """``parts`` as the manifest's tree and the arrays it names (what a file holds)."""
    arrays: dict[str, NDArray[Any]] = {}
    return {name: _pack(part, arrays, name) for name, part in parts.items()}, arrays


def write_archive(
    path: Path, kind: str, parts: Mapping[str, Any], *, scratch: bool = False
) -> None:
    """Write ``parts`` (name -> a part's ``state_dict()``) as a ``kind`` file, atomically
    (``state.files.atomic_write``). ``scratch``: a file rewritten every round that a crash may
    lose (the state store's): neither synced nor hashed."""
    tree, arrays = flatten(parts)
    manifest: dict[str, Any] = {"edgeflex-state": LAYOUT, "kind": kind, "parts": tree}
    manifest["sha256"] = None if scratch else _digest(manifest, arrays)

    def write(fh: IO[bytes]) -> None:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr(MANIFEST, json.dumps(manifest))
            for name, array in arrays.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)

    atomic_write(path, write, durable=not scratch)


def _check_manifest(manifest: Any, kind: str) -> None:
    """The layout and kind the manifest claims: checked before any array is read."""
    if isinstance(manifest, dict) and "edgeflex-checkpoint" in manifest:
        raise StateError(
            f"a checkpoint of an older edgeflex (checkpoint format "
            f"{manifest['edgeflex-checkpoint']!r}), before state files of layout {LAYOUT}: "
            "it cannot be resumed; run again from the start"
        )
    if not isinstance(manifest, dict) or not isinstance(manifest.get("edgeflex-state"), int):
        raise StateError(f"not an edgeflex state file (no layout in {MANIFEST})")
    written = manifest["edgeflex-state"]
    if written != LAYOUT:
        age = "a newer" if written > LAYOUT else "an older"
        raise StateError(f"written by {age} edgeflex (layout {written}, this one reads {LAYOUT})")
    if manifest.get("kind") != kind:
        raise StateError(f"a {manifest.get('kind')!r} file, not a {kind!r} file")


def _members(
    fh: IO[bytes], total: int, kind: str
) -> tuple[dict[str, Any], dict[str, NDArray[Any]]]:
    with zipfile.ZipFile(fh) as archive:
        members = {info.filename: info for info in archive.infolist()}
        info = members.pop(MANIFEST, None)
        if info is None:
            raise StateError(f"no {MANIFEST}")
        for each in [info, *members.values()]:
            if each.compress_type != zipfile.ZIP_STORED:
                raise StateError(f"{each.filename} is compressed (members are stored)")
            if each.file_size > total:  # stored: no member is larger than the file
                raise StateError(f"{each.filename} claims {each.file_size} bytes of {total}")
        if info.file_size > MAX_MANIFEST_BYTES:
            raise StateError(f"a {MANIFEST} of {info.file_size} bytes")
        manifest = json.loads(archive.read(info))
        _check_manifest(manifest, kind)
        arrays = {}
        for name, each in members.items():
            if not MEMBER.match(name):
                raise StateError(f"a member {name!r} that is not one of its arrays")
            data = bytearray(each.file_size)  # the arrays are views of it, writable
            with archive.open(each) as member:
                if typing.cast(io.BufferedIOBase, member).readinto(data) != each.file_size:
                    raise StateError(f"{name} is cut short")
            arrays[name.removesuffix(".npy")] = read_npy(data, name)
    return manifest, arrays


def read_archive(
    path: Path, kind: str, *, parts: tuple[str, ...] | None = None, scratch: bool = False
) -> dict[str, Any]:
    """The parts of the ``kind`` file at ``path`` (name -> a tree of plain values and arrays,
    for the parts' ``load_state_dict``), exactly ``parts`` where given; StateError naming what
    is wrong (the caller names the file). The arrays are writable and the file's own."""
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise StateError(f"cannot be read: {exc}") from None
    with fh:
        magic = fh.read(4)
        if magic[:1] == b"\x80":
            raise StateError("a pickle, which runs code when it is read: never read")
        if magic != ZIP_MAGIC:
            raise StateError("not an edgeflex state file (not a zip archive)")
        fh.seek(0)
        try:
            manifest, arrays = _members(fh, os.fstat(fh.fileno()).st_size, kind)
        except StateError:
            raise
        except (
            zipfile.BadZipFile,
            PayloadError,
            ValueError,
            RecursionError,
            EOFError,
            OSError,
            RuntimeError,
            NotImplementedError,
            MemoryError,
        ) as exc:  # RuntimeError: encrypted
            raise StateError(f"not a readable edgeflex state file: {exc}") from None
    expected = None if scratch else _digest(manifest, arrays)
    if manifest.get("sha256") != expected:
        raise StateError("does not match its SHA-256: it was changed")
    trees = manifest.get("parts")
    if not isinstance(trees, dict):
        raise StateError(f"no parts in {MANIFEST}")
    if parts is not None and set(trees) != set(parts):
        raise StateError(f"parts {', '.join(sorted(trees))}, not {', '.join(parts)}")
    used: set[str] = set()
    read = {name: _unpack(tree, arrays, used, name) for name, tree in trees.items()}
    if set(arrays) - used:
        raise StateError(f"arrays nobody reads: {', '.join(sorted(set(arrays) - used))}")
    return read
