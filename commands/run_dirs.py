"""Where a run's seeds are: a comparison writes ``<out>/<run>/seed-<seed>/``."""

from __future__ import annotations

import re
from pathlib import Path

SEED_DIR = re.compile(r"seed-\d+")


def seed_dirs(path: Path) -> list[tuple[str, Path]]:
    """(run name, results folder) of each seed that ``path`` is or holds: a seed's folder is
    named by the folder above it, a run's folder of ``seed-*`` by itself, and any other
    results folder (``make run``'s) by itself."""
    if not path.is_dir():
        raise ValueError(f"{path}: no such results folder")
    if SEED_DIR.fullmatch(path.name):
        return [(path.parent.name, path)]
    seeds = sorted(p for p in path.iterdir() if p.is_dir() and SEED_DIR.fullmatch(p.name))
    return [(path.name, p) for p in seeds] if seeds else [(path.name, path)]
