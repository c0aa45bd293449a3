"""Processes we start: their executables found, their ports waited for, and each stopped
together with everything it started, by PID.

Flower's SuperLink starts ``flower-superexec`` in a session of its own, which starts
``flwr-simulation`` and Ray: a process-group kill misses them. So we snapshot the tree
(by parent PID, with psutil: Linux and macOS alike) while it is intact, ask everyone to stop,
then kill what is left (including children re-parented to init) and wait until none is alive.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

SYSTEM_BIN = Path("/usr/sbin")  # where Debian puts daemons, often not on a user's PATH


def system_executable(name: str) -> str | None:
    """A system package's executable (on PATH, or Debian's /usr/sbin), or None."""
    found = shutil.which(name)
    if found:
        return found
    path = SYSTEM_BIN / name
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def listening(host: str, port: int) -> bool:
    """Whether something listens at ``host:port`` (a TCP connection succeeds)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def process_tree(root: int) -> set[int]:
    """``root`` and all its live descendants, plus live members of their process groups."""
    parents: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.info["ppid"] is not None:
            parents[proc.pid] = proc.info["ppid"]
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in tree or pid not in parents:
            continue
        tree.add(pid)
        todo.extend(children.get(pid, []))
    groups = {g for pid in tree if (g := _group(pid)) is not None} - {os.getpgrp()}
    tree |= {pid for pid in parents if _group(pid) in groups}
    return tree


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_tree(
    proc: subprocess.Popen[bytes], grace_s: float = 10.0, kill_wait_s: float = 30.0
) -> None:
    """SIGTERM ``proc`` and its descendants, then SIGKILL survivors; raise if any remain."""
    stop_trees([proc], grace_s, kill_wait_s)


def stop_trees(
    procs: list[subprocess.Popen[bytes]], grace_s: float = 10.0, kill_wait_s: float = 30.0
) -> None:
    """``stop_tree`` for several processes at once: all are asked to stop together, so the
    wait is the slowest one's, not the sum."""
    # A process already reaped (a crash we caused) is skipped: its PID may be another's now.
    procs = [proc for proc in procs if proc.poll() is None]
    try:
        stop_pids([proc.pid for proc in procs], grace_s, kill_wait_s)
    finally:
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)


def stop_pids(roots: list[int], grace_s: float = 10.0, kill_wait_s: float = 30.0) -> None:
    """SIGTERM the trees of ``roots`` (PIDs known to be ours and alive), then SIGKILL
    survivors; raise if any remain."""
    known = {p for root in roots for p in process_tree(root)}
    _signal(known, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        known |= {p for root in list(known) if _alive(root) for p in process_tree(root)}
        if not any(_alive(p) for p in known):
            break
        time.sleep(0.1)
    deadline = time.monotonic() + kill_wait_s
    while (alive := {p for p in known if _alive(p)}) and time.monotonic() < deadline:
        _signal(alive, signal.SIGKILL)
        time.sleep(0.1)
    left = sorted(p for p in known if _alive(p))
    if left:
        started = ", ".join(str(pid) for pid in roots)
        raise RuntimeError(f"processes {left} started by PID {started} did not stop")


def stop_session(proc: subprocess.Popen[bytes]) -> None:
    """``stop_tree`` for a process started in a session of its own (Ray's head or node), then
    SIGKILL what its process group left: Ray's daemons leave their parent's tree."""
    if proc.poll() is None:
        stop_tree(proc)
    with contextlib.suppress(ProcessLookupError):  # the group is gone with its leader
        os.killpg(proc.pid, signal.SIGKILL)


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and its descendants at once: a crash or a power cut, for tests."""
    _signal(process_tree(proc.pid), signal.SIGKILL)
    proc.wait(timeout=30)
