"""Checkpoints: what the server needs to continue a stopped run, in one file.

``checkpoint.pkl`` in the results directory holds the global model, the strategy with every
policy's state (replica versions, link estimates, ratio schedule and gain model, index
estimates, the virtual clock, random generators: all inside the strategy object), the records
so far and the run config it was written under. It is written to a temporary file and renamed,
so a crash mid-write leaves the previous checkpoint whole.

What a checkpoint cannot hold: the clients' ``context.state`` (error-feedback residuals,
replicas, stream buffers). In simulation it is lost with the simulation, so a resumed server
forgets which replica each node holds and sends every node the full model in its first round;
residuals start again at zero. A deployment's agents keep their state across a server restart,
but the server still sends full models once: it cannot tell a restarted device from one that
kept its replica.

A pickle runs code when it is read: resume only from checkpoints you wrote.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.settings import ConfigError
from strategies.edge import EdgeStrategy

CHECKPOINT_NAME = "checkpoint.pkl"
FORMAT = 2  # bumped when what a checkpoint holds changes (2: the batch-norm statistics policy)

# Keys a resumed run may change: how long it runs, where it writes, how it waits and saves.
RESUMABLE_KEYS = frozenset(
    {
        "num-server-rounds",
        "virtual-time-budget-s",
        "results-dir",
        "checkpoint-every",
        "resume-from",
        "round-timeout-s",
        "short-polls",
    }
)


@dataclass
class Checkpoint:
    server_round: int  # rounds done: the resumed run starts at the next
    config: dict[str, Any]  # the resolved run config it was written under
    model: np.ndarray  # the global model after ``server_round``, flat
    strategy: EdgeStrategy
    rows: list[dict[str, Any]]  # rounds.jsonl so far
    initial_accuracy: float
    initial_loss: float
    format: int = FORMAT


def checkpoint_path(location: Path) -> Path:
    """A results directory's checkpoint, or ``location`` itself if it names a file."""
    return location / CHECKPOINT_NAME if location.is_dir() else location


def write_checkpoint(results_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write atomically: a temporary file in the same directory, then a rename."""
    path = results_dir / CHECKPOINT_NAME
    partial = path.with_suffix(".pkl.partial")
    with partial.open("wb") as fh:
        pickle.dump(checkpoint, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, path)
    return path


def differing_keys(written: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Run-config keys whose values differ, other than those a resumed run may change."""
    keys = (set(written) | set(now)) - RESUMABLE_KEYS
    return sorted(k for k in keys if written.get(k) != now.get(k))


def read_checkpoint(location: Path, config: Mapping[str, Any]) -> Checkpoint:
    """The checkpoint at ``location`` (a results directory or the file), if it was written
    under ``config`` (the keys in RESUMABLE_KEYS aside); ConfigError naming what is wrong."""
    path = checkpoint_path(location)
    if not path.is_file():
        raise ConfigError(f"resume-from: no checkpoint at {path}")
    with path.open("rb") as fh:
        checkpoint = pickle.load(fh)  # noqa: S301 (the user's own checkpoint: module docstring)
    if not isinstance(checkpoint, Checkpoint) or checkpoint.format != FORMAT:
        raise ConfigError(f"resume-from: {path} is not a checkpoint of this edgeflex version")
    differ = differing_keys(checkpoint.config, config)
    if differ:
        shown = ", ".join(
            f"{k} ({checkpoint.config.get(k)!r} there, {config.get(k)!r} now)" for k in differ
        )
        raise ConfigError(f"resume-from: {path} was written by another configuration: {shown}")
    if checkpoint.server_round >= int(config["num-server-rounds"]):
        raise ConfigError(
            f"resume-from: {path} is after round {checkpoint.server_round}; num-server-rounds "
            f"= {config['num-server-rounds']} leaves nothing to run"
        )
    return checkpoint
