"""One SuperLink and one Ray for many runs: a comparison's lane.

Each ``commands.run`` starts its own ``flower-superlink --simulation`` and its simulation its
own Ray, about half a minute before round 1 on two cores. A lane starts both once: a Ray
head of two CPUs (what a run alone starts, so the same two client actors) and a SuperLink
whose simulations join it through ``RAY_ADDRESS``; its runs are ``flwr run`` processes
submitted one after another (``commands.compare`` submits the next once the last one has
written its records), each with its own results directory, run ID and client actors.
Everything a lane starts is stopped by PID when it closes, also on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commands.app_bundle import stage_app
from commands.flwr_home import RAY_ENV
from commands.processes import stop_session
from commands.run import (
    CONNECTION,
    FLWR_DIR,
    RAY_ADDRESS,
    explicit_overrides,
    federation_config,
    flower_env,
    free_port,
    local_superlink,
    write_connection,
)
from commands.run_config import format_overrides, resolve_settings
from common.settings import PROJECT_ROOT

RAY_CPUS = 2  # what commands.run gives a simulation's own Ray (federation_config)
RAY_START_S = 120.0
RAY_READY = "Ray runtime started."  # what `ray start` prints once the head node runs
RAY_TEMP = "/tmp/edgeflex-"  # + the lane's name: Ray's socket paths must stay short


@dataclass(frozen=True)
class Lane:
    """A running SuperLink joined to a running Ray head; ``submit`` starts a run on it."""

    flwr_home: Path
    app: Path  # the staged app every run of the lane bundles
    ray_address: str
    ray_temp_dir: Path  # RAY_TMPDIR of every process of its Ray

    def submit(self, overrides: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        """``flwr run`` one run (its output to ``log``); the caller waits for it."""
        settings = resolve_settings(overrides)
        cmd = [
            "flwr",
            "run",
            str(self.app),
            CONNECTION,
            "--stream",
            "--run-config",
            format_overrides(explicit_overrides(settings, overrides)),
            "--federation-config",
            federation_config(settings, joins_cluster=True),
        ]
        with log.open("ab") as out:
            return subprocess.Popen(
                cmd,
                env=flower_env(self.flwr_home),
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us; we stop it ourselves
            )


def _ray_head(port: int, temp_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """A Ray head in the foreground (``--block``), in a process group of its own."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--head",
                "--block",
                f"--port={port}",
                # Ray's fixed default ports (10001, 52365) would clash with another head here
                f"--ray-client-server-port={free_port()}",
                f"--dashboard-agent-listen-port={free_port()}",
                f"--num-cpus={RAY_CPUS}",
                "--node-ip-address=127.0.0.1",
                "--include-dashboard=false",
                "--disable-usage-stats",
                "--object-store-memory=200000000",  # not Ray's 30 % of the machine
                f"--temp-dir={temp_dir}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **RAY_ENV, "RAY_TMPDIR": str(temp_dir)},
        )


@contextlib.contextmanager
def lane(logs_dir: Path) -> Iterator[Lane]:
    """Start a Ray head and a SuperLink (both at once), yield the lane, stop both by PID."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    name = f"lane-{os.getpid()}-{time.monotonic_ns()}"
    flwr_home = FLWR_DIR / name
    temp_dir = Path(f"{RAY_TEMP}{name}")
    port = free_port()
    address = f"127.0.0.1:{port}"
    ray = _ray_head(port, temp_dir, logs_dir / "ray.log")
    try:
        with local_superlink(
            flwr_home,
            logs_dir / "superlink.log",
            # its simulations join this head, their Ray files under its temp dir
            extra_env={RAY_ADDRESS: address, "RAY_TMPDIR": str(temp_dir)},
        ) as superlink_port:
            write_connection(flwr_home, superlink_port)
            # Its GCS port listens before its raylet runs: a simulation that joins then fails.
            deadline = time.monotonic() + RAY_START_S
            while RAY_READY not in (logs_dir / "ray.log").read_text(errors="replace"):
                if ray.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"no Ray head on {address}; see {logs_dir / 'ray.log'}")
                time.sleep(0.2)
            yield Lane(flwr_home, stage_app(flwr_home / "app"), address, temp_dir)
    finally:
        stop_session(ray)
        shutil.rmtree(flwr_home, ignore_errors=True)
        shutil.rmtree(temp_dir, ignore_errors=True)
