"""The fleet gate (commands/fleet_gate.py): a real nginx in front of a real TLS SuperLink, both
on loopback. Through the gate a device reaches the Fleet API and nothing else: the Control API
that registers SuperNode keys answers on the SuperLink's own (loopback) port only."""

import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from commands.fleet_gate import GateFiles, local_gate
from commands.make_certificates import make_certificates
from commands.run import CONNECTION, flower_env, local_superlink, write_connection

pytestmark = [pytest.mark.usefixtures("nginx"), pytest.mark.slow]  # starts nginx and Flower


def _register(home: Path, port: int, ca: Path, public_key: Path) -> subprocess.CompletedProcess:
    """``flwr supernode register``, as anyone holding ca.crt could run it, against ``port``."""
    write_connection(home, port, ca)
    return subprocess.run(
        ["flwr", "supernode", "register", str(public_key), CONNECTION],
        env=flower_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _raw_status(port: int, ca: Path, path: str) -> str:
    """The status line of a POST to ``path`` sent as written (clients normalise ``..``)."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.sendall(
            f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
            "Content-Type: application/protobuf\r\nConnection: close\r\n\r\n".encode()
        )
        return tls.recv(4096).decode(errors="replace").split("\r\n")[0]


def test_the_gate_passes_the_fleet_api_and_refuses_the_control_api(tmp_path: Path) -> None:
    ca, _, cert, key = make_certificates(tmp_path / "certs")
    tls = ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    own_key = ec.generate_private_key(ec.SECP384R1()).public_key()
    public_key = tmp_path / "intruder.pub"
    public_key.write_bytes(
        own_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    with (
        local_superlink(
            tmp_path / "home",
            tmp_path / "superlink.log",
            simulation=False,
            tls_args=[*tls, "--enable-supernode-auth"],
            ca_file=ca,
        ) as port,
        local_gate(port, GateFiles(ca, cert, key), tmp_path / "gate", tmp_path) as gate,
    ):

        def post(at: int, path: str) -> httpx.Response:
            return httpx.post(
                f"https://127.0.0.1:{at}{path}",
                verify=str(ca),
                content=b"",
                headers={"content-type": "application/protobuf"},  # as Flower sends
            )

        # The Control API: open on the SuperLink's port (no account check in Flower's open
        # source SuperLink), refused by the gate before it reaches the SuperLink.
        assert post(port, "/v1/control/list-nodes").status_code == 200
        refused = post(gate, "/v1/control/list-nodes")
        assert refused.status_code == 403 and refused.headers["server"].startswith("nginx")
        assert post(gate, "/v1/serverappio/pull-messages").status_code == 403  # runtime API
        # The Fleet API passes: the SuperLink itself answers (an unsigned request: 401).
        passed = post(gate, "/v1/fleet/get-run")
        assert passed.status_code == 401 and "SuperNode authentication" in passed.text

        # nginx matches locations on the normalised path and forwards the raw one: paths
        # that only normalise into /v1/fleet/ stop at the gate.
        for tricky in (
            "/v1/control/list-nodes/../../fleet/get-run",
            "/v1/fleet/../control/list-nodes",
            "/v1//fleet/get-run",
            "/v1/./fleet/get-run",
            "/v1/fleet/get-run?x=/../../control/list-nodes",
        ):
            assert _raw_status(gate, ca, tricky).endswith("403 Forbidden"), tricky
        assert _raw_status(gate, ca, "/v1/fleet/get-run").endswith("401 Unauthorized")

        # The attack: register a key of one's own with only ca.crt in hand.
        through_gate = _register(tmp_path / "home", gate, ca, public_key)
        assert through_gate.returncode != 0 and "403" in through_gate.stdout + through_gate.stderr
        on_the_server = _register(tmp_path / "home", port, ca, public_key)  # flwr on loopback
        assert on_the_server.returncode == 0, on_the_server.stdout + on_the_server.stderr
    access = (tmp_path / "gate-access.log").read_text()
    assert '"POST /v1/control/list-nodes HTTP/1.1" 403' in access
    assert '"POST /v1/fleet/get-run HTTP/1.1" 401' in access
