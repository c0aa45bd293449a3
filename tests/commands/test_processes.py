"""Stopping what we started, by PID: every tree asked at once, the stubborn ones killed."""

import subprocess
import sys

import pytest

from commands.processes import _alive, process_tree, stop_trees

pytestmark = pytest.mark.slow  # starts processes


READY = "print('ready', flush=True); time.sleep(60)"
IGNORES_SIGTERM = f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); {READY}"
STARTS_A_CHILD = f"import subprocess, time; subprocess.Popen(['sleep', '60']); {READY}"
PLAIN = f"import time; {READY}"


def test_every_tree_stops_and_a_process_that_ignores_sigterm_is_killed() -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
        )
        for code in (IGNORES_SIGTERM, STARTS_A_CHILD, PLAIN)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        pids = {pid for proc in procs for pid in process_tree(proc.pid)}
        assert len(pids) == 4  # three, and the child of one
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # reaped: its PID may be reused, so it must not be signalled
        stop_trees([*procs, gone], grace_s=0.5)
        assert not any(_alive(pid) for pid in pids)
        assert procs[0].returncode == -9  # SIGKILL after the grace period
        assert procs[2].returncode == -15
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
