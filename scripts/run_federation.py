"""Run one experiment on a local multi-process federation: a SuperLink and N SuperNodes.

    python -m scripts.run_federation --run-config 'configs/scadles.toml num-clients=3'
    python -m scripts.run_federation --tls --run-config 'num-clients=3 num-server-rounds=5'

The processes are the ones a real deployment runs (docs/deployment.md), here all on loopback:
1. ``flower-superlink`` (Flower's deployment runtime, not the simulation), ``--insecure`` or,
   with ``--tls``, with a fresh CA and server certificate and SuperNode authentication (each
   node's public key registered with ``flwr supernode register`` before it connects);
2. one ``flower-supernode`` per client, its identity in ``--node-config``: ``partition-id``,
   ``num-partitions`` and, when streams are on, the device's ``stream-rate``;
3. ``flwr run . <connection> --stream`` with ``timing = "measured"`` and ``lr-scale-max = 1``
   unless the run config says otherwise (rounds of seconds make rate batches, and so an
   uncapped linear learning-rate factor, large enough to diverge; README).
Every process is stopped by PID (with everything it started) when the run ends, fails or is
interrupted. Exit code 0 only when the run wrote its ``summary.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from common.rates import STREAM_OFF, client_rate
from common.settings import PROJECT_ROOT, Settings
from scripts.make_certificates import make_certificates, write_private_key
from scripts.processes import kill_tree, stop_tree
from scripts.run_simulation import (
    CONNECTION,
    FLWR_DIR,
    flower_env,
    format_overrides,
    free_port,
    launch,
    local_superlink,
    resolve_settings,
    write_connection,
)


@dataclass
class Federation:
    """A running local federation: where it lives and its SuperNode processes."""

    flwr_home: Path
    port: int
    logs_dir: Path
    settings: Settings
    node_args: list[str]  # security flags of every SuperNode (its key is added per node)
    auth: bool = False
    supernodes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)  # to stop, all

    def env(self) -> dict[str, str]:
        return flower_env(self.flwr_home)

    def start_node(self, index: int) -> subprocess.Popen[bytes]:
        """Start (or start again: a device that comes back) the SuperNode of partition
        ``index``; with authentication, under a newly registered key."""
        args = list(self.node_args)
        if self.auth:
            key = self.flwr_home / "keys" / f"node-{index}-{len(self.started)}"
            key.parent.mkdir(parents=True, exist_ok=True)
            _register(self, _node_key(key))
            args += ["--auth-supernode-private-key", str(key)]
        home = self.flwr_home / f"node-{index}-{len(self.started)}"  # its own app cache
        home.mkdir(parents=True, exist_ok=True)
        with (self.logs_dir / f"supernode-{index}.log").open("ab") as log:
            proc = subprocess.Popen(
                [
                    "flower-supernode",
                    *args,
                    "--superlink",
                    f"127.0.0.1:{self.port}",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    node_config(self.settings, index),
                ],
                env=flower_env(home),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, not it: we stop it ourselves
                cwd=home,
            )
        self.started.append(proc)
        self.supernodes[index] = proc
        return proc

    def crash_node(self, index: int) -> None:
        """Kill the SuperNode of partition ``index`` with SIGKILL (no goodbye to the
        SuperLink), as a device that loses power would go."""
        kill_tree(self.supernodes.pop(index))

    def stop_all_nodes(self) -> None:
        errors = []
        for proc in reversed(self.started):
            try:
                stop_tree(proc)
            except RuntimeError as exc:
                errors.append(str(exc))
        if errors:
            raise RuntimeError("; ".join(errors))

    def run_app(
        self,
        run_config: Mapping[str, Any],
        *,
        stream_to: Any = None,
        timeout_s: float | None = None,
    ) -> int:
        """``flwr run`` the project on this federation; return its exit code."""
        cmd = [
            "flwr",
            "run",
            str(PROJECT_ROOT),
            CONNECTION,
            "--stream",
            "--run-config",
            format_overrides(run_config),
        ]
        with subprocess.Popen(
            cmd,
            env=self.env(),
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=stream_to,
            stderr=subprocess.STDOUT if stream_to is not None else None,
            start_new_session=True,
        ) as proc:
            try:
                return proc.wait(timeout=timeout_s)
            finally:
                stop_tree(proc)


def node_config(settings: Settings, partition_id: int) -> str:
    """What one SuperNode is told about itself (``--node-config``)."""
    pairs = [f"partition-id={partition_id}", f"num-partitions={settings.num_clients}"]
    if settings.stream_rates != STREAM_OFF and not settings.stream_rates_vary:
        rate = client_rate(
            settings.stream_rates, partition_id, settings.num_clients, settings.seed, 0
        )
        pairs.append(f"stream-rate={rate!r}")
    return " ".join(pairs)


def _node_key(path: Path) -> Path:
    """An ECDSA key pair for SuperNode authentication; returns the public key's path."""
    key = ec.generate_private_key(ec.SECP384R1())
    write_private_key(path, key, serialization.PrivateFormat.OpenSSH)  # what Flower reads
    public = path.with_suffix(".pub")
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
    )
    return public


@contextlib.contextmanager
def local_federation(
    settings: Settings, logs_dir: Path, *, tls: bool = False
) -> Iterator[Federation]:
    """A SuperLink and ``num-clients`` SuperNodes on loopback, each stopped by PID on exit."""
    flwr_home = FLWR_DIR / f"federation-{os.getpid()}-{time.monotonic_ns()}"
    logs_dir.mkdir(parents=True, exist_ok=True)
    tls_args: list[str] | None = None
    ca_file: Path | None = None
    if tls:
        ca_file, _, server_cert, server_key = make_certificates(flwr_home / "certs")
        tls_args = [
            "--ssl-ca-certfile",
            str(ca_file),
            "--ssl-certfile",
            str(server_cert),
            "--ssl-keyfile",
            str(server_key),
            "--enable-supernode-auth",
        ]
    try:
        with local_superlink(
            flwr_home,
            logs_dir / "superlink.log",
            simulation=False,
            tls_args=tls_args,
            ca_file=ca_file,
        ) as port:
            write_connection(flwr_home, port, ca_file)
            federation = Federation(
                flwr_home,
                port,
                logs_dir,
                settings,
                node_args=["--insecure"]
                if ca_file is None
                else ["--root-certificates", str(ca_file)],
                auth=tls,
            )
            try:
                for index in range(settings.num_clients):
                    federation.start_node(index)
                yield federation
            finally:
                federation.stop_all_nodes()  # before the SuperLink
    finally:
        shutil.rmtree(flwr_home, ignore_errors=True)


def _register(federation: Federation, public_key: Path) -> None:
    """Allow a SuperNode's key on the SuperLink (``--enable-supernode-auth``)."""
    done = subprocess.run(
        ["flwr", "supernode", "register", str(public_key), CONNECTION],
        env=federation.env(),
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"flwr supernode register failed: {done.stdout.decode()} {done.stderr.decode()}"
        )


def deployment_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deployment measures its times, and linear lr scaling never raises the learning rate,
    unless told otherwise."""
    return {"timing": "measured", "lr-scale-max": 1.0, **overrides}


def run(
    overrides: Mapping[str, Any],
    *,
    tls: bool = False,
    stream_to: Any = None,
    timeout_s: float | None = None,
) -> tuple[int, Path]:
    """Run one experiment on a fresh local federation; return (exit code, results dir)."""
    overrides = deployment_overrides(overrides)
    settings = resolve_settings(overrides)
    results_dir = Path(settings.results_dir)
    explicit = {k: v for k, v in settings.to_run_config().items() if k in overrides}
    explicit["results-dir"] = settings.results_dir
    with local_federation(settings, results_dir, tls=tls) as federation:
        code = federation.run_app(explicit, stream_to=stream_to, timeout_s=timeout_s)
    if code == 0 and not (results_dir / "summary.json").exists():
        code = 1
    return code, results_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-config", default="", help="'key=value ...' or a TOML file")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="TLS with a fresh CA and SuperNode authentication (default: --insecure)",
    )
    args = parser.parse_args(argv)
    return launch(
        lambda overrides: run(overrides, tls=args.tls),
        args.run_config,
        stopped="the SuperLink and SuperNodes were",
        logs="the superlink.log and supernode-*.log files in {results_dir}",
    )


if __name__ == "__main__":
    sys.exit(main())
