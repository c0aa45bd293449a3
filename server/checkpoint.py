"""Checkpoints: what the server needs to continue a stopped run, in one file of data.

``checkpoint.npz`` in the results directory is a zip archive (NumPy's npz layout, stored, not
compressed) of one ``.npy`` member per array and a ``manifest.json``: the format version, the
round, the run config it was written under, the records so far, and the strategy with every
policy's state (replica versions, link estimates, ratio schedule and gain model, index
estimates, the virtual clock) as a tree of data (common/state_file.py), with a SHA-256 of all
of it. Reading it runs no code from the file: arrays are read without pickle, the strategy is
rebuilt beside a fresh one built from the settings (only classes defined in edgeflex's own
packages, no constructor run, no function named by the file), and a file that is foreign,
changed since it was written, newer or older, or written under another configuration is
refused with the reason. The SHA-256 has no key: it catches a damaged or edited copy, not
someone who rewrites the hash too; what keeps such a file harmless is that nothing in it
chooses code. Settings a resumed run may change (RESUMABLE_KEYS) are taken from the fresh
build. It is written to a temporary file and renamed, so a crash mid-write leaves the previous
checkpoint whole.

The clients' ``context.state`` (error-feedback residuals, replicas, stream buffers) is not in
this file: in simulation each client writes its own beside it and a resumed run reads it back
(``server/client_states.py``), so the resumed rounds are the rounds the run would have had. A
deployment's agents keep their own state; a resumed server sends them the full model once (it
cannot pair a device's state with the checkpoint's round).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from common.npy import read_member
from common.settings import ConfigError
from common.state_file import StateError, dump_state, load_state
from strategies.edge import EdgeStrategy

CHECKPOINT_NAME = "checkpoint.npz"
PICKLED_NAME = "checkpoint.pkl"  # what edgeflex wrote before format 3: refused, never read
MANIFEST = "manifest.json"
FORMAT = 5  # bumped when what a checkpoint holds changes (3: data, not a pickle; 4: issue 38;
# 5: Allreduce keeps its round's index set and the model size, RoundStats.ratio_policy)
MAX_MANIFEST_BYTES = 1 << 30
ZIP_MAGIC = b"PK\x03\x04"

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
    strategy: EdgeStrategy
    rows: list[dict[str, Any]]  # rounds.jsonl so far
    initial_accuracy: float
    initial_loss: float


def checkpoint_path(location: Path) -> Path:
    """A results directory's checkpoint, or ``location`` itself if it names a file."""
    return location / CHECKPOINT_NAME if location.is_dir() else location


def _digest(manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over the manifest (its own digest aside) and every array's dtype, shape and bytes."""
    digest = hashlib.sha256()
    body = {k: v for k, v in manifest.items() if k != "sha256"}
    digest.update(json.dumps(body, sort_keys=True).encode())
    for key in sorted(arrays):
        array = np.ascontiguousarray(arrays[key])
        digest.update(f"{key} {array.dtype.str} {array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def write_checkpoint(results_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write atomically: a temporary file in the same directory, then a rename."""
    strategy, arrays = dump_state(checkpoint.strategy)
    arrays = {**arrays, "model": checkpoint.model}
    manifest: dict[str, Any] = {
        "edgeflex-checkpoint": FORMAT,
        "round": checkpoint.server_round,
        "config": checkpoint.config,
        "initial": {"accuracy": checkpoint.initial_accuracy, "loss": checkpoint.initial_loss},
        "rows": checkpoint.rows,
        "strategy": strategy,
    }
    manifest["sha256"] = _digest(manifest, arrays)
    path = results_dir / CHECKPOINT_NAME
    partial = path.with_suffix(".npz.partial")
    with partial.open("wb") as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr(MANIFEST, json.dumps(manifest))
            for key, array in arrays.items():
                with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asarray(array), allow_pickle=False)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, path)
    return path


def differing_keys(written: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """Run-config keys whose values differ, other than those a resumed run may change."""
    keys = (set(written) | set(now)) - RESUMABLE_KEYS
    return sorted(k for k in keys if written.get(k) != now.get(k))


def _read_archive(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic[:1] == b"\x80":
        raise ConfigError(
            f"resume-from: {path} is a pickle (a checkpoint of edgeflex before format 3?); "
            "a pickle runs code when it is read, so edgeflex never reads one"
        )
    if magic != ZIP_MAGIC:
        raise ConfigError(f"resume-from: {path} is not an edgeflex checkpoint (not an npz archive)")
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename: info for info in archive.infolist()}
            info = members.pop(MANIFEST, None)
            if info is None:
                raise ValueError(f"no {MANIFEST}")
            for each in [info, *members.values()]:
                if each.compress_type != zipfile.ZIP_STORED:
                    raise ValueError(f"{each.filename} is compressed (edgeflex stores members)")
            if info.file_size > MAX_MANIFEST_BYTES:
                raise ValueError(f"{MANIFEST} of {info.file_size} bytes")
            manifest = json.loads(archive.read(info))
            arrays = {}
            for name, each in members.items():
                if not name.endswith(".npy") or "/" in name:
                    raise ValueError(f"a member {name!r} that is not an array")
                with archive.open(each) as member:
                    arrays[name.removesuffix(".npy")] = read_member(member, each.file_size, name)
    except (
        zipfile.BadZipFile,
        ValueError,
        RecursionError,
        EOFError,
        OSError,
        RuntimeError,
        NotImplementedError,
        MemoryError,
    ) as exc:  # RuntimeError: an encrypted member
        raise ConfigError(
            f"resume-from: {path} is not a readable edgeflex checkpoint: {exc}"
        ) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("edgeflex-checkpoint"), int):
        raise ConfigError(
            f"resume-from: {path} is not an edgeflex checkpoint (no format in {MANIFEST})"
        )
    return manifest, arrays


def _checked_manifest(path: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    written = manifest["edgeflex-checkpoint"]
    if written != FORMAT:
        age = "a newer" if written > FORMAT else "an older"
        raise ConfigError(
            f"resume-from: {path} was written by {age} edgeflex (checkpoint format {written}; "
            f"this one reads {FORMAT})"
        )
    if manifest.get("sha256") != _digest(manifest, arrays):
        raise ConfigError(f"resume-from: {path} does not match its SHA-256: it was changed")
    expected = {"round": int, "config": dict, "initial": dict, "rows": list}
    for key, kind in expected.items():
        if not isinstance(manifest.get(key), kind):
            raise ConfigError(f"resume-from: {path}: {key} in {MANIFEST} is not a {kind.__name__}")
    if "model" not in arrays:
        raise ConfigError(f"resume-from: {path} holds no model")


def read_checkpoint(location: Path, config: Mapping[str, Any], fresh: EdgeStrategy) -> Checkpoint:
    """The checkpoint at ``location`` (a results directory or the file), if it was written
    under ``config`` (the keys in RESUMABLE_KEYS aside), its strategy rebuilt beside ``fresh``
    (built from the same settings); ConfigError naming what is wrong. Nothing in the file runs."""
    path = checkpoint_path(location)
    if not path.is_file():
        pickled = location / PICKLED_NAME if location.is_dir() else None
        if pickled is not None and pickled.is_file():
            path = pickled  # refused below, by its content
        else:
            raise ConfigError(f"resume-from: no checkpoint at {path}")
    manifest, arrays = _read_archive(path)
    _checked_manifest(path, manifest, arrays)
    differ = differing_keys(manifest["config"], config)
    if differ:
        shown = ", ".join(
            f"{k} ({manifest['config'].get(k)!r} there, {config.get(k)!r} now)" for k in differ
        )
        raise ConfigError(f"resume-from: {path} was written by another configuration: {shown}")
    if manifest["round"] >= int(config["num-server-rounds"]):
        raise ConfigError(
            f"resume-from: {path} is after round {manifest['round']}; num-server-rounds "
            f"= {config['num-server-rounds']} leaves nothing to run"
        )
    try:
        strategy = load_state(manifest.get("strategy"), arrays, fresh)
    except StateError as exc:
        raise ConfigError(f"resume-from: {path}: {exc}") from exc
    if type(strategy) is not type(fresh):
        raise ConfigError(f"resume-from: {path} does not hold a {type(fresh).__name__}")
    model = arrays["model"]
    if model.dtype != np.float32 or model.shape != (fresh.layout.size,):
        raise ConfigError(
            f"resume-from: {path}: the model is not {fresh.layout.size} float32 numbers "
            f"({model.dtype}, shape {model.shape})"
        )
    if not np.isfinite(model).all():
        raise ConfigError(f"resume-from: {path}: the model holds NaN or infinity")
    initial = manifest["initial"]
    if not all(isinstance(initial.get(k), (int, float)) for k in ("accuracy", "loss")):
        raise ConfigError(f"resume-from: {path}: initial accuracy and loss are not numbers")
    return Checkpoint(
        server_round=manifest["round"],
        config=manifest["config"],
        model=model,
        strategy=strategy,
        rows=manifest["rows"],
        initial_accuracy=float(initial["accuracy"]),
        initial_loss=float(initial["loss"]),
    )
