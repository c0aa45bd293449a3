"""What a device keeps on disk between its agent's starts (``--state-dir``): the key it is
known by, its last node id, and its run's ``context.state``, so a restarted agent is the same
node with the same state."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from flwr.app import RecordDict

from client.fleet import Keys, new_keys
from client.state import read_state, write_state
from state.archive import StateError
from state.files import atomic_write

log = logging.getLogger("edgeflex.agent")

KEY_FILE, NODE_ID_FILE = "node.key", "node-id"  # in --state-dir: who this device is
STATE_SUFFIX = ".npz"  # in --state-dir: <run id>.npz, a run's context.state (client/state.py)
KIND = "device-state"


@dataclass
class DeviceState:
    """What a device keeps on disk (``--state-dir``): its key, its node id, each run's
    ``context.state``. Without a directory, nothing is kept."""

    directory: Path | None = None

    def own_keys(self) -> Keys | None:
        """The key this device registers itself with (made on its first start)."""
        if self.directory is None:
            return None
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        path = self.directory / KEY_FILE
        if not path.exists():
            made, _ = new_keys()
            pem = made.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            atomic_write(path, pem)
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(private, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{path}: not an elliptic-curve private key")
        return private, private.public_key()

    def last_node_id(self) -> int | None:
        path = None if self.directory is None else self.directory / NODE_ID_FILE
        return None if path is None or not path.exists() else int(path.read_text())

    def note_node_id(self, node_id: int) -> None:
        if self.directory is not None:
            atomic_write(self.directory / NODE_ID_FILE, str(node_id).encode())

    def load(self, run_id: int) -> RecordDict:
        """The run's state as the last reply left it; empty for a new run, or (logged) when
        the file is not a state."""
        path = None if self.directory is None else self.directory / f"{run_id}{STATE_SUFFIX}"
        if path is None or not path.exists():
            return RecordDict()
        try:
            state = read_state(path, KIND)
        except StateError as exc:
            log.error("%s is not a state (%s): run %d starts from an empty one", path, exc, run_id)
            return RecordDict()
        log.info("run %d: %d records of state from %s", run_id, len(state), path)
        return state

    def save(self, run_id: int, state: RecordDict) -> None:
        if self.directory is not None:
            path = self.directory / f"{run_id}{STATE_SUFFIX}"
            write_state(path, KIND, state)

    def forget_runs_but(self, run_id: int) -> None:
        """A device runs one run at a time: the states of the others go."""
        if self.directory is not None:
            for path in self.directory.glob(f"*{STATE_SUFFIX}"):
                if path.name != f"{run_id}{STATE_SUFFIX}":
                    path.unlink(missing_ok=True)
