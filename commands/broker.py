"""A local MQTT broker (mosquitto) of our own on loopback, started and stopped by its PID.

Tests and launchers run stream samples through a real broker, never one that happens to be
running on the machine (the Debian package may start a system service on :1883): each
``local_broker`` gets a free port, a config file of its own and a log next to it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from commands.processes import listening, stop_tree, system_executable
from commands.run import free_port
from wire.stream_samples import BrokerAddress

MISSING = (
    "mosquitto is not installed: `make venv` installs it with apt-get as root; "
    "or apt-get install mosquitto"
)
CONFIG_NAME = "mosquitto.conf"
READY_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 20


def mosquitto_path() -> str | None:
    """The mosquitto executable, or None when it is not installed."""
    return system_executable("mosquitto")


def broker_config(
    port: int, password_file: Path | None = None, acl_file: Path | None = None
) -> str:
    """What our broker runs with; each line says why."""
    if password_file is None:
        access = ["allow_anonymous true"]  # loopback tests; a LAN broker needs a password file
    else:  # who may connect, and (acl_file) which topics each may read or write
        access = ["allow_anonymous false", f"password_file {password_file}"]
        access += [] if acl_file is None else [f"acl_file {acl_file}"]
        access += ["user root"]  # reads the files it was given (as root it would drop to its own)
    return "\n".join(
        [
            f"listener {port} 127.0.0.1",  # loopback only, a port of our own
            *access,
            "persistence false",  # nothing to keep between test sessions
            # Persistent sessions queue without limit (default 1000 per client), so a device
            # whose agent reconnects loses nothing. max_inflight_messages stays at its default
            # (20): it bounds unacknowledged sends, and what waits beyond it is queued.
            "max_queued_messages 0",
            "log_dest stderr",  # our Popen sends it to the log file: no file the broker opens
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "",
        ]
    )


def accepts(address: BrokerAddress) -> bool:
    """Whether something listens at ``address`` (a TCP connection succeeds)."""
    return listening(address.host, address.port)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def write_password_file(workdir: Path, users: dict[str, str]) -> Path:
    """A mosquitto password file (hashed by ``mosquitto_passwd``) for ``users``."""
    path = workdir / "passwords"
    path.write_text("")
    for user, password in users.items():
        subprocess.run(["mosquitto_passwd", "-b", str(path), user, password], check=True)
    return path


@contextlib.contextmanager
def local_broker(
    workdir: Path,
    log_path: Path | None = None,
    users: dict[str, str] | None = None,
    acl: str | None = None,
) -> Iterator[BrokerAddress]:
    """Run mosquitto on a free loopback port while the context is open; stop it by PID after.

    The config goes to ``workdir/mosquitto.conf``, the log to ``log_path`` (default
    ``workdir/mosquitto.log``). No PID file: run as root, mosquitto drops to its own user
    before writing one, and could not write it here; the broker is our child, ``proc.pid``.
    With ``users`` (name -> password) only they may connect; ``acl`` is mosquitto's ACL file
    text (``user NAME`` then ``topic read|write|readwrite TOPIC`` lines).
    """
    executable = mosquitto_path()
    if executable is None:
        raise RuntimeError(MISSING)
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = log_path or workdir / "mosquitto.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    address = BrokerAddress("127.0.0.1", free_port())
    passwords = None if users is None else write_password_file(workdir, users)
    acl_file = None
    if acl is not None:
        acl_file = workdir / "acl"
        acl_file.write_text(acl)
    config = workdir / CONFIG_NAME
    config.write_text(broker_config(address.port, passwords, acl_file))
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [executable, "-c", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us, not it: we stop it ourselves
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not accepts(address):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"mosquitto exited early (code {proc.returncode}); the end of "
                    f"{log_path}:\n{_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mosquitto not accepting connections on {address} after "
                    f"{READY_TIMEOUT_S:.0f} s; the end of {log_path}:\n{_tail(log_path)}"
                )
            time.sleep(0.05)
        yield address
    finally:
        stop_tree(proc)
