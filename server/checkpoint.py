"""Checkpoints: what the server needs to continue a stopped run, in one state file.

``checkpoint.npz`` in the results directory is a state archive (state/archive.py: arrays read
without pickle, a JSON manifest, a SHA-256) of kind ``checkpoint`` with three parts, each with
its schema version: ``run`` (the round, the run config it was written under, the records so
far, the accuracy and loss before training), ``model`` (the global model after that round) and
``strategy`` (``EdgeStrategy.state_dict``: what every part learnt; what the settings decide is
built from them again). Reading checks every field and refuses, naming what is wrong, a file
that is foreign, damaged, of another layout or schema, or written under another configuration
(the keys a resumed run may change, RESUMABLE_KEYS, aside); the strategy is the fresh one the
settings build, with the file's state loaded onto it. It is written atomically
(state/files.py), so a crash mid-write leaves the previous checkpoint whole.

The clients' ``context.state`` (error-feedback residuals, replicas, stream buffers) is not in
this file: in simulation each client writes its own beside it and a resumed run reads it back
(``server/client_states.py``), so the resumed rounds are the rounds the run would have had. A
deployment's agents keep their own state; a resumed server sends them the full model once (it
cannot pair a device's state with the checkpoint's round).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.settings import ConfigError
from state.archive import StateError, read_archive, write_archive
from state.fields import Fields
from strategies.edge import EdgeStrategy

CHECKPOINT_NAME = "checkpoint.npz"
PICKLED_NAME = "checkpoint.pkl"  # what edgeflex once wrote: refused, never read
KIND = "checkpoint"
RUN_SCHEMA = 1
MODEL_SCHEMA = 1

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
        "packed-messages",
        "wake-broker",
        "state-store",  # where vectors live, not what they are
        "state-store-dir",
    }
)


@dataclass
class Checkpoint:
    server_round: int  # rounds done: the resumed run starts at the next
    config: dict[str, Any]  # the resolved run config it was written under
    model: np.ndarray  # the global model after ``server_round``, flat
    strategy: EdgeStrategy  # written: its state_dict; read: the fresh one, state loaded
    rows: list[dict[str, Any]]  # rounds.jsonl so far
    initial_accuracy: float
    initial_loss: float


def checkpoint_path(location: Path) -> Path:
    """A results directory's checkpoint, or ``location`` itself if it names a file."""
    return location / CHECKPOINT_NAME if location.is_dir() else location


def write_checkpoint(results_dir: Path, checkpoint: Checkpoint) -> Path:
    path = results_dir / CHECKPOINT_NAME
    run = {
        "schema": RUN_SCHEMA,
        "round": checkpoint.server_round,
        "config": checkpoint.config,
        "rows": checkpoint.rows,
        "initial_accuracy": checkpoint.initial_accuracy,
        "initial_loss": checkpoint.initial_loss,
    }
    model = {"schema": MODEL_SCHEMA, "vector": checkpoint.model}
    parts = {"run": run, "model": model, "strategy": checkpoint.strategy.state_dict()}
    write_archive(path, KIND, parts)
    return path


def differing_keys(written: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Run-config keys whose values differ, other than those a resumed run may change."""
    keys = (set(written) | set(now)) - RESUMABLE_KEYS
    return sorted(k for k in keys if written.get(k) != now.get(k))


def _run_part(state: object) -> tuple[int, dict[str, Any], list[Any], float, float]:
    fields = Fields("run", state, RUN_SCHEMA)
    server_round = fields.integer("round", least=1)
    config, rows = fields.raw("config"), fields.raw("rows")
    accuracy, loss = fields.number("initial_accuracy"), fields.number("initial_loss")
    fields.done()
    if not isinstance(config, dict) or not isinstance(rows, list):
        raise StateError("run: config is not a mapping, or rows not a list")
    if len(rows) != server_round or not all(isinstance(r, dict) for r in rows):
        raise StateError(f"run: {len(rows)} rows of records for round {server_round}")
    return server_round, config, rows, accuracy, loss


def _model_part(state: object, size: int) -> np.ndarray:
    fields = Fields("model", state, MODEL_SCHEMA)
    vector = fields.array("vector", "float32", (size,))
    fields.done()
    if not np.isfinite(vector).all():
        raise StateError("model: the vector holds NaN or infinity")
    return vector


def checkpoint_file(location: Path) -> Path:
    """The file a resume reads at ``location`` (the launcher asks before anything starts);
    ConfigError when there is none."""
    path = checkpoint_path(location)
    if path.is_file():
        return path
    pickled = location / PICKLED_NAME if location.is_dir() else None
    if pickled is None or not pickled.is_file():
        raise ConfigError(f"resume-from: no checkpoint at {path}")
    return pickled  # refused by its content when read


def read_checkpoint(location: Path, config: Mapping[str, Any], fresh: EdgeStrategy) -> Checkpoint:
    """The checkpoint at ``location`` (a results directory or the file), if it was written
    under ``config`` (the keys in RESUMABLE_KEYS aside), its state loaded onto ``fresh``
    (built from the same settings); ConfigError naming what is wrong. Nothing in the file runs."""
    path = checkpoint_file(location)
    try:
        parts = read_archive(path, KIND, parts=("run", "model", "strategy"))
        server_round, written, rows, accuracy, loss = _run_part(parts["run"])
        differ = differing_keys(written, config)
        if differ:
            shown = ", ".join(
                f"{k} ({written.get(k)!r} there, {config.get(k)!r} now)" for k in differ
            )
            raise ConfigError(f"resume-from: {path} was written by another configuration: {shown}")
        if server_round >= int(config["num-server-rounds"]):
            raise ConfigError(
                f"resume-from: {path} is after round {server_round}; num-server-rounds "
                f"= {config['num-server-rounds']} leaves nothing to run"
            )
        model = _model_part(parts["model"], fresh.layout.size)
        fresh.load_state_dict(parts["strategy"])
    except StateError as exc:
        raise ConfigError(f"resume-from: {path}: {exc}") from None
    return Checkpoint(server_round, written, model, fresh, rows, accuracy, loss)
