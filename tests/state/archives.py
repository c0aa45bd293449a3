"""Editing a state file as an attacker or a damaged disk would: the manifest and members of
the archive, rewritten (and, for a crafted file, hashed again so only the content is wrong)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from state.archive import MANIFEST, _digest

Change = Callable[[dict[str, Any], dict[str, bytes]], None]


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def rewrite(path: Path, change: Change, *, rehash: bool) -> None:
    """Rewrite the archive at ``path`` with ``change(manifest, members)`` applied; ``rehash``:
    give it the SHA-256 of what it now holds (a file crafted to pass the check)."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    manifest = json.loads(members.pop(MANIFEST))
    change(manifest, members)
    if rehash and manifest.get("sha256") is not None:
        held = {
            name.removesuffix(".npy"): np.load(io.BytesIO(data), allow_pickle=False)
            for name, data in members.items()
        }
        manifest["sha256"] = _digest(manifest, held)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(MANIFEST, json.dumps(manifest))
        for name, data in members.items():
            archive.writestr(name, data)
