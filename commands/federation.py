"""Run one experiment on a local multi-process federation: a SuperLink and N SuperNodes.

    python -m commands.federation --run-config 'configs/scadles.toml num-clients=3'
    python -m commands.federation --tls --run-config 'num-clients=3 num-server-rounds=5'

The processes are the ones a real deployment runs (docs/deployment.md), here all on loopback:
1. ``flower-superlink`` (Flower's deployment runtime, not the simulation), ``--insecure`` or,
   with ``--tls``, with a fresh CA and server certificate and SuperNode authentication (each
   node's public key registered with ``flwr supernode register`` before it connects), and the
   nodes behind a fleet gate (``commands/fleet_gate.py``: they reach the Fleet API, not the
   Control API that registers keys);
2. one ``flower-supernode`` per client, its identity in ``--node-config``: ``partition-id``,
   ``num-partitions`` and, when streams are on, the device's ``stream-rate``; or, with
   ``--agents``, one ``edgeflex-agent`` per client (node and ClientApp in one process), woken
   through a mosquitto on loopback (``wake-broker``);
3. ``flwr run . <connection> --stream`` with ``timing = "measured"`` and ``lr-scale-max = 1``
   unless the run config says otherwise (rounds of seconds make rate batches, and so an
   uncapped linear learning-rate factor, large enough to diverge: docs/results/deployment.md).
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from client.live_stream import open_session
from commands.app_bundle import stage_app
from commands.broker import local_broker
from commands.fleet_gate import GateFiles, local_gate
from commands.make_certificates import make_certificates, write_private_key
from commands.processes import kill_tree, stop_tree, stop_trees
from commands.publish_stream import publisher_command
from commands.run import (
    CONNECTION,
    FLWR_DIR,
    flower_env,
    free_port,
    launch,
    local_superlink,
    write_connection,
)
from commands.run_config import describe_model, format_overrides, resolve_settings
from common.rates import STREAM_OFF, client_rate
from common.settings import PROJECT_ROOT, Settings
from wire.stream_samples import BrokerAddress

SUPEREXEC_POLL_S = 0.1  # Flower's SuperExec (no agent) polls its SuperNode this often


@dataclass(frozen=True)
class NodeRuntime:
    """How each node runs its ClientApp messages.

    ``agents``: each node is an ``edgeflex-agent`` (no SuperNode, no process per message),
    woken through a local mosquitto unless ``wake_ups`` is off; ``short_polls``:
    ``edgeflex-supernode`` instead of ``flower-supernode`` and ``short-polls = true`` for the
    ServerApp (flwr 1.42.x only; ``common.flower_patches``); ``heartbeat_s``: the nodes'
    heartbeat interval (Flower's 30 s: a dead node keeps its place for a minute); ``mqtt``:
    agents train on samples a replay publisher per node sends through the local mosquitto
    (needs ``agents``)."""

    agents: bool = False
    wake_ups: bool = True  # with agents
    short_polls: bool = False
    heartbeat_s: float | None = None  # None: Flower's
    mqtt: bool = False  # a mosquitto on loopback, a publisher per node, agents subscribed


@dataclass
class Federation:
    """A running local federation: where it lives and its SuperNode processes."""

    flwr_home: Path
    port: int  # the SuperLink's, on loopback: flwr run and supernode register
    logs_dir: Path
    settings: Settings
    node_args: list[str]  # security flags of every SuperNode (its key is added per node)
    auth: bool = False
    runtime: NodeRuntime = NodeRuntime()
    nodes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)  # by partition
    broker: BrokerAddress | None = None  # agents: the local mosquitto (wake-ups, streams)
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)  # to stop, all
    fleet_port: int | None = None  # with TLS: the fleet gate's (commands/fleet_gate.py)

    def env(self) -> dict[str, str]:
        return flower_env(self.flwr_home)

    def _supernode_command(self) -> list[str]:
        if not self.runtime.short_polls:
            return ["flower-supernode"]
        return [sys.executable, "-m", "client.supernode"]

    def _popen(self, cmd: list[str], log_name: str, home: Path) -> subprocess.Popen[bytes]:
        env = {**flower_env(home), "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(SUPEREXEC_POLL_S)}
        with (self.logs_dir / log_name).open("ab") as log:
            proc = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches us, not it: we stop it ourselves
                cwd=home,
            )
        self.started.append(proc)
        return proc

    def start_node(self, index: int) -> subprocess.Popen[bytes]:
        """Start (or start again: a device that comes back) the node of partition ``index``.
        A SuperNode comes back as a new node (under a newly registered key, with
        authentication); an agent comes back as the same node, with the key and state it
        keeps in its state directory."""
        args = [*self.node_args, "--superlink", f"127.0.0.1:{self.fleet_port or self.port}"]
        args += ["--node-config", node_config(self.settings, index)]
        if self.auth:
            key = self.flwr_home / "keys" / f"node-{index}-{len(self.started)}"
            if self.runtime.agents:
                key = self.flwr_home / "keys" / f"node-{index}"
            if not key.exists():
                key.parent.mkdir(parents=True, exist_ok=True)
                _register(self, _node_key(key))
            args += ["--auth-supernode-private-key", str(key)]
        home = self.flwr_home / f"node-{index}-{len(self.started)}"  # its own app cache
        home.mkdir(parents=True, exist_ok=True)
        heartbeat = self.runtime.heartbeat_s
        if heartbeat is not None:
            args += ["--heartbeat-interval-s", str(heartbeat)]
        if self.runtime.agents:
            args += ["--state-dir", str(self.flwr_home / f"device-{index}")]
            if self.broker is not None and self.runtime.wake_ups:
                args += ["--wake-broker", str(self.broker)]
            if self.runtime.mqtt:
                args += ["--mqtt", str(self.broker)]  # the partition: --node-config's
            command = [sys.executable, "-m", "client.agent", *args]
            proc = self._popen(command, f"agent-{index}.log", home)
        else:
            command = [*self._supernode_command(), *args, "--port", str(free_port())]
            proc = self._popen(command, f"supernode-{index}.log", home)
        self.nodes[index] = proc
        return proc

    def start_publisher(self, index: int) -> subprocess.Popen[bytes]:
        """Replay partition ``index`` to its topic at its rate, until stopped."""
        assert self.broker is not None
        home = self.flwr_home / f"publisher-{index}"
        home.mkdir(parents=True, exist_ok=True)
        run_config = format_overrides(self.settings.to_run_config())
        return self._popen(
            publisher_command(self.broker, index, run_config), f"publisher-{index}.log", home
        )

    def crash_node(self, index: int) -> None:
        """SIGKILL the node of partition ``index`` (no goodbye to the SuperLink), as a device
        that loses power would go."""
        kill_tree(self.nodes.pop(index))

    def stop_all_nodes(self) -> None:
        stop_trees(self.started)

    def run_app(
        self,
        run_config: Mapping[str, Any],
        *,
        stream_to: Any = None,
        timeout_s: float | None = None,
    ) -> int:
        """``flwr run`` the project on this federation; return its exit code."""
        if self.runtime.agents and self.runtime.wake_ups:
            assert self.broker is not None
            run_config = {**run_config, "wake-broker": str(self.broker)}
        cmd = [
            "flwr",
            "run",
            str(stage_app(self.flwr_home / "app")),
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
    pairs = [f"partition-id={partition_id}", f"num-partitions={settings.run.num_clients}"]
    if settings.streams.stream_rates != STREAM_OFF and not settings.streams.stream_rates_vary:
        rate = client_rate(
            settings.streams.stream_rates,
            partition_id,
            settings.run.num_clients,
            settings.run.seed,
            0,
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
    settings: Settings,
    logs_dir: Path,
    *,
    tls: bool = False,
    runtime: NodeRuntime = NodeRuntime(),
    superlink_command: Sequence[str] = ("flower-superlink",),
) -> Iterator[Federation]:
    """A SuperLink (started by ``superlink_command``) and ``num-clients`` SuperNodes on
    loopback, each stopped by PID on exit."""
    flwr_home = FLWR_DIR / f"federation-{os.getpid()}-{time.monotonic_ns()}"
    logs_dir.mkdir(parents=True, exist_ok=True)
    if runtime.mqtt and not runtime.agents:
        raise ValueError(
            "MQTT streams need the agents (--agents): a ClientApp process per "
            "message has nowhere to keep a subscription"
        )
    if runtime.heartbeat_s is not None and not (runtime.short_polls or runtime.agents):
        raise ValueError(
            "a heartbeat interval is set by edgeflex-supernode or edgeflex-agent: add "
            "--short-polls or --agents"
        )
    tls_args: list[str] | None = None
    ca_file: Path | None = None
    gate_files: GateFiles | None = None
    if tls:
        ca_file, _, server_cert, server_key = make_certificates(flwr_home / "certs")
        gate_files = GateFiles(ca_file, server_cert, server_key)
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
        with (
            contextlib.ExitStack() as stack,
            local_superlink(
                flwr_home,
                logs_dir / "superlink.log",
                simulation=False,
                tls_args=tls_args,
                ca_file=ca_file,
                command=superlink_command,
            ) as port,
        ):
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
                runtime=runtime,
            )
            if gate_files is not None:  # the nodes reach the Fleet API only, as on a LAN
                federation.fleet_port = stack.enter_context(
                    local_gate(port, gate_files, flwr_home / "gate", logs_dir)
                )
            if runtime.agents and (runtime.mqtt or runtime.wake_ups):
                federation.broker = stack.enter_context(
                    local_broker(flwr_home / "broker", logs_dir / "mosquitto.log")
                )
            if runtime.mqtt:
                assert federation.broker is not None  # mqtt needs agents
                for index in range(settings.run.num_clients):  # before anything is published
                    open_session(federation.broker, index)
            try:
                for index in range(settings.run.num_clients):
                    federation.start_node(index)
                if runtime.mqtt:
                    for index in range(settings.run.num_clients):
                        federation.start_publisher(index)
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


def deployment_overrides(
    overrides: Mapping[str, Any], runtime: NodeRuntime = NodeRuntime()
) -> dict[str, Any]:
    """A deployment measures its times, and linear lr scaling never raises the learning rate,
    unless told otherwise; short polls on the nodes go with short pulls on the server."""
    defaults: dict[str, Any] = {"timing": "measured", "lr-scale-max": 1.0}
    if runtime.short_polls:
        defaults["short-polls"] = True
    return {**defaults, **overrides}


def run(
    overrides: Mapping[str, Any],
    *,
    tls: bool = False,
    runtime: NodeRuntime = NodeRuntime(),
    stream_to: Any = None,
    timeout_s: float | None = None,
) -> tuple[int, Path]:
    """Run one experiment on a fresh local federation; return (exit code, results dir)."""
    overrides = deployment_overrides(overrides, runtime)
    settings = resolve_settings(overrides)
    print(describe_model(settings), file=stream_to or sys.stdout, flush=True)
    results_dir = Path(settings.run.results_dir)
    explicit = {k: v for k, v in settings.to_run_config().items() if k in overrides}
    explicit["results-dir"] = settings.run.results_dir
    with local_federation(settings, results_dir, tls=tls, runtime=runtime) as federation:
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
    parser.add_argument(
        "--agents",
        action="store_true",
        help="each node is an edgeflex-agent: node and ClientApp in one process per device",
    )
    parser.add_argument(
        "--no-wake-ups",
        action="store_true",
        help="with --agents: no mosquitto for wake-ups; nodes and ServerApp poll",
    )
    parser.add_argument(
        "--short-polls",
        action="store_true",
        help="shorten Flower's fixed waits: edgeflex-supernode (idle poll 0.1 s, not 3 s) and "
        "short-polls = true (flwr 1.42.x only)",
    )
    parser.add_argument(
        "--heartbeat-s",
        type=float,
        default=None,
        help="with --short-polls or --agents: the nodes' heartbeat interval (Flower's 30 s, at "
        "least 10 s); the SuperLink drops a node silent for twice that",
    )
    parser.add_argument(
        "--mqtt",
        action="store_true",
        help="streams over MQTT: a mosquitto on loopback, a replay publisher per node, agents "
        "subscribed (implies --agents)",
    )
    args = parser.parse_args(argv)
    runtime = NodeRuntime(
        agents=args.agents or args.mqtt,
        wake_ups=not args.no_wake_ups,
        short_polls=args.short_polls,
        heartbeat_s=args.heartbeat_s,
        mqtt=args.mqtt,
    )
    return launch(
        lambda overrides: run(overrides, tls=args.tls, runtime=runtime),
        args.run_config,
        stopped="the SuperLink and SuperNodes were",
        logs="the superlink.log, supernode-*.log and agent-*.log files in {results_dir}",
    )


if __name__ == "__main__":
    sys.exit(main())
