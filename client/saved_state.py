"""A client's state across a checkpoint, in simulation: at a checkpoint round the server asks
every node to write its ``context.state`` (error-feedback residual, replica, stream buffer and
clock, adaptive share, ...) to a file per partition, and a resumed run asks each new node to
read its partition's back, so the resumed rounds are the rounds the run would have had.

Only where clients and server share a file system (Flower's simulation, the in-process
federation); a device keeps its own state in its agent's ``--state-dir``. The files are state
files of kind ``client-state`` (client/state.py: every entry declared and checked; data, never
code). The node's cached partition data (``LOCAL_DATA_KEY``) is made again, not saved.
"""

from __future__ import annotations

import re
from pathlib import Path

from flwr.app import Context, Message

from client.node import LOCAL_DATA_KEY, node_identity, store_directory
from client.state import read_state, write_state
from common.settings import Settings
from state.store import use_store
from state.vectors import vectors_in_memory, vectors_into_store
from wire.keys import CLIENT_STATE_DIR
from wire.queries import StateRequest, state_reply

ROUND_DIR = re.compile(r"round-\d+")
MAX_STATE_BYTES = 1 << 33  # 8 GiB: far more than any state of ours; a file larger is not one


KIND = "client-state"


def state_file(directory: Path, partition_id: int) -> Path:
    return directory / f"partition-{partition_id}.npz"


def _directory(request: StateRequest, *allowed: str) -> Path:
    """The request's directory: a server names where its own run's client states are, nothing
    else. It must be a ``client-state/round-R`` directory, and lie in one of the ``allowed``
    directories (the run's results-dir; to read back, also the checkpoint's) when the run
    names one (with the default, the server's timestamped directory is not known here)."""
    directory = Path(request.directory).resolve()
    if directory.parent.name != CLIENT_STATE_DIR or not ROUND_DIR.fullmatch(directory.name):
        raise ValueError(f"{directory} is not a {CLIENT_STATE_DIR}/round-R directory")
    roots = [Path(a).resolve() for a in allowed if a]
    roots = [r.parent if r.is_file() else r for r in roots]  # resume-from may name the file
    if roots and not any(directory.is_relative_to(root) for root in roots):
        raise ValueError(f"{directory} is not in {' or '.join(map(str, roots))}")
    return directory


def save_state(msg: Message, context: Context) -> Message:
    """Write this node's state for the checkpoint the request names."""
    settings = Settings.from_run_config(context.run_config, tables=False)
    partition_id = node_identity(context, settings)
    directory = _directory(StateRequest.parse(msg.content), settings.run.results_dir)
    kept = vectors_in_memory(context.state)  # the state store's vectors read back in
    if LOCAL_DATA_KEY in kept:
        del kept[LOCAL_DATA_KEY]
    directory.mkdir(parents=True, exist_ok=True)
    write_state(state_file(directory, partition_id), KIND, kept)
    return Message(content=state_reply(partition_id, restored=False), reply_to=msg)


def restore_state(msg: Message, context: Context) -> Message:
    """Replace this node's state with its partition's saved one, when there is one."""
    settings = Settings.from_run_config(context.run_config, tables=False)
    partition_id = node_identity(context, settings)
    request = StateRequest.parse(msg.content)
    directory = _directory(request, settings.run.results_dir, settings.run.resume_from)
    path = state_file(directory, partition_id)
    restored = path.is_file()
    if restored:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise ValueError(f"{path} holds {path.stat().st_size} bytes: not a state")
        saved = read_state(path, KIND)  # its vectors themselves: it never points at files
        for key in list(context.state):
            del context.state[key]
        for key, record in saved.items():
            if key != LOCAL_DATA_KEY:  # made from the partition, never taken from a file
                context.state[key] = record
        # with a state store, the vectors go to disk now, not when the node next trains
        use_store(context.state, store_directory(context, settings))
        vectors_into_store(context.state)
    return Message(content=state_reply(partition_id, restored), reply_to=msg)
