"""The one atomic write of the project."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def atomic_write(
    path: Path, write: bytes | Callable[[IO[bytes]], None], *, durable: bool = True
) -> None:
    """Write ``path`` so that a kill or a power cut at any point leaves the old file or the new
    one, never a mix: a temporary file of its own in the same directory (mode 0600, never
    through a link), synced, renamed into place, and the directory synced for the rename.
    ``write`` is the bytes, or a function that writes them. ``durable = False`` skips the two
    syncs (a run's scratch, rewritten every round: a crash loses the run anyway)."""
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as f:
            if isinstance(write, bytes):
                f.write(write)
            else:
                write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    if durable:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
