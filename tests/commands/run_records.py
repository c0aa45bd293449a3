"""Finished runs made by hand: the records a plot or an export reads."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from common.settings import default_run_config


def write_run(directory: Path, rows: Sequence[Mapping[str, Any]], **config: Any) -> Path:
    """``rounds.jsonl`` and ``summary.json`` (the defaults' configuration with ``config``,
    in settings' spelling: ``collective``, ``batch-policy``...) in ``directory``."""
    directory.mkdir(parents=True)
    (directory / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    resolved = default_run_config() | {k.replace("_", "-"): v for k, v in config.items()}
    (directory / "summary.json").write_text(json.dumps({"config": resolved}))
    return directory


def rows(accuracies: Sequence[float], times: Sequence[float]) -> list[dict[str, Any]]:
    """One round per accuracy, at the given virtual times, 1 MB up and 2 MB down each."""
    return [
        {
            "round": i + 1,
            "virtual_time_s": t,
            "accuracy": a,
            "bytes_up": 1_000_000,
            "bytes_down": 2_000_000,
        }
        for i, (a, t) in enumerate(zip(accuracies, times, strict=True))
    ]
