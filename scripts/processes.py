"""Stopping a process we started together with everything it started, by PID.

Flower's SuperLink starts ``flower-superexec`` in a session of its own, which starts
``flwr-simulation`` and Ray: a process-group kill misses them. So we snapshot the tree
(by parent PID, read from /proc) while it is intact, ask everyone to stop, then kill what
is left (including children re-parented to init) and wait until none is alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None if the
    process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of ``pid``, or None if it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else (fields[0], int(fields[1]), int(fields[2]))


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def process_tree(root: int) -> set[int]:
    """``root`` and all its live descendants, plus live members of their process groups."""
    stats = {pid: s for pid in _all_pids() if (s := _stat(pid)) is not None and s[0] != "Z"}
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in tree or pid not in stats:
            continue
        tree.add(pid)
        todo.extend(children.get(pid, []))
    groups = {stats[pid][2] for pid in tree}
    tree |= {
        pid for pid, (_, _, group) in stats.items() if group in groups and group != os.getpgrp()
    }
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
    known = {p for proc in procs for p in process_tree(proc.pid)}
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
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    left = sorted(p for p in known if _alive(p))
    if left:
        started = ", ".join(str(proc.pid) for proc in procs)
        raise RuntimeError(f"processes {left} started by PID {started} did not stop")


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` and its descendants at once: a crash or a power cut, for tests."""
    _signal(process_tree(proc.pid), signal.SIGKILL)
    proc.wait(timeout=30)
