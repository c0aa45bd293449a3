"""The fleet gate: a TLS reverse proxy (nginx) that lets devices reach the SuperLink's Fleet API
and nothing else.

Flower 1.42 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr supernode
register``) and the runtime API on one HTTP port, and the open-source SuperLink has no account
check on the Control API: with SuperNode authentication on, anyone who reaches that port and
holds ``ca.crt`` can register a key of their own and join as a node. So the SuperLink listens on
loopback only, and the devices' network reaches it through this gate: it terminates TLS with
the server's certificate, forwards ``/v1/fleet/`` to the SuperLink (over TLS, checked against
the CA) and answers 403 to every other path. ``flwr`` runs on the server, against loopback.

    python -m commands.fleet_gate --listen 0.0.0.0:9443 --superlink 127.0.0.1:8000 \\
        --certs certs/ --dir ~/.edgeflex/gate      # runs nginx in the foreground

``commands.federation --tls`` puts its SuperNodes behind one on loopback (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from commands.make_certificates import CERTIFICATE_FILES
from commands.processes import listening, stop_tree, system_executable
from commands.run import free_port

MISSING = (
    "nginx is not installed: `make venv` installs it (nginx-light) with apt-get as root; "
    "or apt-get install nginx-light"
)
FLEET_PATH = "/v1/fleet/"
FLEET_CALL = r"^/v1/fleet/[a-z-]+$"  # the raw request line's path: Flower's Fleet calls
READY_TIMEOUT_S = 10.0
# Flower pushes and pulls arrays in chunks of 5 MiB, each in its own request.
MAX_BODY = "64m"


@dataclass(frozen=True)
class GateFiles:
    """The TLS files the gate serves with and checks the SuperLink against."""

    ca: Path  # the CA the SuperLink's certificate is signed by
    cert: Path  # the server certificate (valid for the names the devices use and localhost)
    key: Path

    @classmethod
    def in_dir(cls, certs: Path) -> GateFiles:
        """The files commands/make_certificates.py writes there."""
        ca, _, cert, key = (certs / name for name in CERTIFICATE_FILES)
        return cls(ca, cert, key)


def nginx_path() -> str | None:
    """The nginx executable, or None when it is not installed."""
    return system_executable("nginx")


def site_config(listen: str, superlink: str, files: GateFiles, logs: Path) -> str:
    """The gate's ``server`` block: what nginx's ``http`` block holds for it. Beside the gate
    this command runs, it is a site file for the system's nginx (``--site`` prints it;
    deploy/nginx/edgeflex-fleet-gate.conf is it for the paths docs/deployment.md uses)."""
    return "\n".join(
        [
            "server {",
            f"    listen {listen} ssl;",
            f"    access_log {logs / 'gate-access.log'};",  # every request and its status
            f"    client_max_body_size {MAX_BODY};",
            f"    ssl_certificate {files.cert};",
            f"    ssl_certificate_key {files.key};",
            "    ssl_protocols TLSv1.2 TLSv1.3;",
            f"    location {FLEET_PATH} {{",
            # nginx matches the location on the normalised path but forwards the raw one:
            # only a plain Fleet call (/v1/fleet/<name>) goes through, never ../ or // tricks.
            f'        if ($request_uri !~ "{FLEET_CALL}") {{ return 403; }}',
            f"        proxy_pass https://{superlink};",
            "        proxy_http_version 1.1;",
            "        proxy_request_buffering off;",  # chunks pass as they come
            "        proxy_buffering off;",
            f"        proxy_ssl_trusted_certificate {files.ca};",
            "        proxy_ssl_verify on;",
            "        proxy_ssl_name localhost;",  # make_certificates: valid for localhost
            "        proxy_ssl_server_name on;",
            "    }",
            "    location / { return 403; }",  # Control and runtime APIs: not from here
            "}",
            "",
        ]
    )


def gate_config(
    listen: str, superlink: str, files: GateFiles, workdir: Path, logs: Path, user: str
) -> str:
    """nginx's configuration for the gate: its files under ``workdir``, ``gate-access.log``
    (every request and its status) and ``gate-error.log`` under ``logs``."""
    temp = workdir / "temp"
    site = site_config(listen, superlink, files, logs)
    return "\n".join(
        [
            f"pid {workdir / 'nginx.pid'};",
            f"error_log {logs / 'gate-error.log'} notice;",
            f"user {user};",  # the workers' (the master, as root, reads the key first)
            "worker_processes 1;",
            "events { worker_connections 1024; }",  # two per device (it and the SuperLink)
            "http {",
            f"    client_body_temp_path {temp}/body;",
            f"    proxy_temp_path {temp}/proxy;",
            f"    fastcgi_temp_path {temp}/fastcgi;",
            f"    uwsgi_temp_path {temp}/uwsgi;",
            f"    scgi_temp_path {temp}/scgi;",
            *(f"    {line}" for line in site.splitlines()),
            "}",
            "",
        ]
    )


@contextlib.contextmanager
def local_gate(superlink_port: int, files: GateFiles, workdir: Path, logs: Path) -> Iterator[int]:
    """A gate on a free loopback port in front of the SuperLink at 127.0.0.1:``superlink_port``
    while the context is open; yields its port, and stops it by PID after."""
    executable = nginx_path()
    if executable is None:
        raise RuntimeError(MISSING)
    port = free_port()
    (workdir / "temp").mkdir(parents=True, exist_ok=True)
    config = workdir / "nginx.conf"
    listen, superlink = f"127.0.0.1:{port}", f"127.0.0.1:{superlink_port}"
    user = pwd.getpwuid(os.getuid()).pw_name  # loopback, for tests: workers stay who we are
    config.write_text(gate_config(listen, superlink, files, workdir, logs, user))
    log_path = logs / "gate-error.log"
    with (workdir / "nginx.out").open("ab") as out:
        proc = subprocess.Popen(
            [executable, "-e", str(log_path), "-p", str(workdir), "-c", str(config)]
            + ["-g", "daemon off;"],  # our child, stopped by its PID
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not listening("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise RuntimeError(f"the fleet gate (nginx) did not start; {log_path}:\n{tail}")
            time.sleep(0.05)
        yield port
    finally:
        stop_tree(proc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT the devices connect to")
    parser.add_argument("--superlink", default="127.0.0.1:8000", help="the SuperLink, on loopback")
    parser.add_argument("--certs", type=Path, required=True, help="commands.make_certificates' dir")
    parser.add_argument("--dir", type=Path, required=True, help="the gate's config, logs, temp")
    parser.add_argument("--user", default="nobody", help="nginx's worker user (started as root)")
    parser.add_argument(
        "--site",
        action="store_true",
        help="print the gate as a site file for the system's nginx (logs in --dir) and exit",
    )
    args = parser.parse_args(argv)
    files = GateFiles.in_dir(args.certs.resolve())
    if args.site:
        print(site_config(args.listen, args.superlink, files, args.dir.resolve()), end="")
        return
    executable = nginx_path()
    if executable is None:
        raise SystemExit(MISSING)
    workdir = args.dir.resolve()
    (workdir / "temp").mkdir(parents=True, exist_ok=True)
    if os.getuid() == 0:  # the workers write request bodies there
        shutil.chown(workdir / "temp", user=args.user)
    config = workdir / "nginx.conf"
    config.write_text(gate_config(args.listen, args.superlink, files, workdir, workdir, args.user))
    command = [executable, "-e", str(workdir / "gate-error.log"), "-p", str(workdir)]
    os.execv(executable, [*command, "-c", str(config), "-g", "daemon off;"])


if __name__ == "__main__":
    main()
