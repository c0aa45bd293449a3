"""deploy/: the systemd units verified by systemd-analyze, the agent unit's arguments taken by
the agent itself (the partition named once, by the instance), the nginx site files equal to
what the fleet gate generates, the compose file parsed and its images on the Flower of
pyproject.toml, and the image built where a Docker daemon runs."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from client.agent import main as agent_main
from client.fleet import parse_node_config
from commands.fleet_gate import GateFiles, site_config
from common.settings import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
AGENT_UNIT = DEPLOY / "systemd" / "edgeflex-agent@.service"
AGENT_ENV = DEPLOY / "systemd" / "agent.env"
COMPOSE = DEPLOY / "docker" / "compose.yaml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
SITE_FILES = [DEPLOY / "nginx" / "edgeflex-fleet-gate.conf", DEPLOY / "docker" / "gate.conf"]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSTEM_UNITS = Path("/usr/lib/systemd/system")


def unit_entries(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) in order; continuation lines joined, comments left out."""
    entries, section, pending = [], "", ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.append((section, key.strip(), value.strip()))
    return entries


def unit_value(path: Path, key: str) -> str:
    (value,) = [v for _, k, v in unit_entries(path) if k == key]
    return value


def _verify(root: Path, units: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SYSTEMD_ANALYZE or "systemd-analyze", "verify", "--man=no", "--generators=no"]
        + [f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _unit_root(tmp_path: Path, units: list[Path]) -> Path:
    """A root directory holding this machine's system units, ``units`` in /etc/systemd/system
    and, for every ExecStart, a stand-in executable where the install puts the real one
    (/opt/edgeflex/.venv: what the units run is not installed at that path here)."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    etc = root / "etc" / "systemd" / "system"
    etc.mkdir(parents=True)
    for unit in units:
        shutil.copy(unit, etc / unit.name)
        executable = root / shlex.split(unit_value(unit, "ExecStart"))[0].lstrip("/")
        executable.parent.mkdir(parents=True, exist_ok=True)
        executable.write_text("#!/bin/sh\n")
        executable.chmod(0o755)
    return root


def _instances(units: list[Path]) -> list[str]:
    return [u.name.replace("@.", "@0.") for u in units]  # a template verifies as an instance


needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None or not SYSTEM_UNITS.is_dir(),
    reason="systemd-analyze or the system's units (/usr/lib/systemd/system) are not here",
)


@pytest.mark.slow
@needs_systemd_analyze
def test_every_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """Syntax, every directive and specifier known to this systemd, the units they order
    against present, the executables where ExecStart names them (stand-ins); not checked:
    that the credentials and environment files exist (they are the operator's)."""
    assert {u.name for u in UNITS} == {
        "edgeflex-agent@.service",
        "edgeflex-superlink.service",
        "edgeflex-fleet-gate.service",
    }
    done = _verify(_unit_root(tmp_path, UNITS), _instances(UNITS))
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.slow
@needs_systemd_analyze
def test_the_verification_finds_a_fault(tmp_path: Path) -> None:
    broken = tmp_path / "edgeflex-agent@.service"
    text = AGENT_UNIT.read_text().replace("Restart=always", "Restart=sometimes")
    broken.write_text(text.replace("DynamicUser=yes", "DynamicUsr=yes"))
    root = _unit_root(tmp_path, [broken])
    done = _verify(root, _instances([broken]))
    assert "Unknown key" in done.stderr and "DynamicUsr" in done.stderr
    assert "sometimes" in done.stderr
    (root / "opt" / "edgeflex" / ".venv" / "bin" / "edgeflex-agent").unlink()
    assert _verify(root, _instances([AGENT_UNIT])).returncode != 0  # no executable


def test_every_service_waits_for_the_clock_and_assumes_no_account() -> None:
    for unit in UNITS:
        entries = unit_entries(unit)
        keys = {k: v for _, k, v in entries}
        assert keys.get("DynamicUser") == "yes" and "User" not in keys, unit.name
        assert "StateDirectory" in keys, unit.name
    for unit in (AGENT_UNIT, DEPLOY / "systemd" / "edgeflex-superlink.service"):
        for key in ("After", "Wants"):
            assert "time-sync.target" in unit_value(unit, key).split(), (unit.name, key)


def _systemd_expand(
    command: str, instance: str, env: dict[str, str], **specifiers: str
) -> list[str]:
    """ExecStart as systemd runs it: specifiers, then ${NAME} within a word and $NAME as
    words of its own (split at whitespace; nothing when unset)."""
    for name, value in {"i": instance, **specifiers}.items():
        command = command.replace(f"%{name}", value)
    argv: list[str] = []
    for word in shlex.split(command):
        if re.fullmatch(r"\$[A-Za-z_]\w*", word):
            argv += env.get(word[1:], "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


def _env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile's NAME=value lines (comments and blank lines left out)."""
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return {name: value.strip() for name, value in (line.split("=", 1) for line in lines)}


def test_the_agent_unit_takes_the_partition_from_its_instance_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The instance name is in ExecStart once, as --node-config's partition-id; the fleet's
    environment file names no partition; and the agent takes every argument the unit gives it
    (it stops at the one bad value this test adds, after all the unit's)."""
    command = unit_value(AGENT_UNIT, "ExecStart")
    assert len(re.findall(r"%[iI]", command)) == 1
    assert "partition-id" not in AGENT_ENV.read_text().replace("No partition-id", "")
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "ca.crt").write_bytes(b"a CA certificate")  # read as bytes, checked by TLS
    key = ec.generate_private_key(ec.SECP384R1())
    (credentials / "node-key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
    )
    argv = _systemd_expand(
        command,
        "7",
        _env_file(AGENT_ENV),
        d=str(credentials),
        S=str(tmp_path / "state"),
        N="edgeflex-agent@7",
    )
    assert argv[0] == "/opt/edgeflex/.venv/bin/edgeflex-agent"
    node_config = parse_node_config(argv[argv.index("--node-config") + 1])
    assert node_config["partition-id"] == 7 and node_config["num-partitions"] == 3
    with pytest.raises(SystemExit) as exit_info:
        agent_main([*argv[1:], "--idle-poll-s", "0"])
    assert exit_info.value.code == 2
    assert "--idle-poll-s must be within" in capsys.readouterr().err
    # A partition typed in the environment file as well is refused, not silently overridden.
    twice = _env_file(AGENT_ENV) | {"EDGEFLEX_NODE_CONFIG": "partition-id=1 num-partitions=3"}
    argv = _systemd_expand(command, "7", twice, d=str(credentials), S=str(tmp_path), N="x")
    with pytest.raises(SystemExit):
        agent_main(argv[1:])
    assert "names partition-id more than once" in capsys.readouterr().err


def _written_by(path: Path) -> dict[str, str]:
    """The ``--flag value`` pairs of the command a generated file's header names."""
    header = " ".join(
        line.lstrip("#").strip().rstrip("\\")
        for line in path.read_text().splitlines()
        if line.startswith("#")
    )
    words = shlex.split(header[header.index("python -m commands.fleet_gate") :].split("(")[0])
    return {w: v for w, v in zip(words, words[1:], strict=False) if w.startswith("--")}


@pytest.mark.parametrize("path", SITE_FILES, ids=lambda p: p.name)
def test_each_nginx_site_file_is_what_the_fleet_gate_generates(path: Path) -> None:
    flags = _written_by(path)
    body = "".join(line for line in path.read_text().splitlines(True) if not line.startswith("#"))
    files = GateFiles.in_dir(Path(flags["--certs"]))
    assert body == site_config(flags["--listen"], flags["--superlink"], files, Path(flags["--dir"]))


def test_the_gate_unit_and_site_file_front_the_superlink_unit() -> None:
    superlink = unit_value(DEPLOY / "systemd" / "edgeflex-superlink.service", "ExecStart")
    assert "--host 127.0.0.1 --port 8000" in superlink  # loopback only
    gate = unit_value(DEPLOY / "systemd" / "edgeflex-fleet-gate.service", "ExecStart")
    site = _written_by(SITE_FILES[0])
    assert f"--listen {site['--listen']} --superlink {site['--superlink']}" in gate
    assert site["--superlink"] == "127.0.0.1:8000"


def _flower_range() -> SpecifierSet:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
    (flwr,) = [d for d in project["dependencies"] if re.match(r"flwr[\s>=<\[]", d)]
    return SpecifierSet(re.sub(r"^flwr(\[[^\]]*\])?", "", flwr))


def test_the_images_are_flowers_at_the_flower_of_pyproject() -> None:
    flower = _flower_range()
    default = re.search(r"^ARG FLWR_VERSION=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert default is not None and Version(default.group(1)) in flower
    bases = re.findall(r"^FROM (\S+) AS (\w+)$", DOCKERFILE.read_text(), re.M)
    assert bases == [
        ("flwr/supernode:${FLWR_VERSION}", "agent"),
        ("flwr/superexec:${FLWR_VERSION}", "serverapp"),
    ]
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    image, tag = services["superlink"]["image"].split(":")
    assert image == "flwr/superlink" and Version(tag) in flower


def test_the_compose_file_runs_a_gated_federation_of_agents() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    agents = {name: s for name, s in services.items() if name.startswith("agent-")}
    assert len(agents) >= 2
    partitions = []
    for name, agent in agents.items():
        assert agent["platform"] == "linux/arm64" and agent["networks"] == ["fleet"]
        args = dict(a.removeprefix("--").split("=", 1) for a in agent["command"])
        assert args["superlink"] == "gate:9443"  # the gate, never the SuperLink itself
        node_config = parse_node_config(args["node-config"])
        partitions.append(node_config["partition-id"])
        assert node_config["num-partitions"] == len(agents), name
        assert agent["image"] == "edgeflex-agent:local"
    assert sorted(partitions) == list(range(len(agents)))
    assert services["agent-0"]["build"]["target"] == "agent"
    assert services["serverapp"]["build"]["target"] == "serverapp"
    assert (DEPLOY / "docker" / services["agent-0"]["build"]["context"]).resolve() == PROJECT_ROOT
    assert "fleet" not in services["superlink"]["networks"]
    assert set(services["gate"]["networks"]) == {"server", "fleet"}
    assert all(p.startswith("127.0.0.1:") for p in services["superlink"]["ports"])


def _docker_answers(*args: str) -> bool:
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        done = subprocess.run([docker, *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(
    not _docker_answers("compose", "version"), reason="no docker compose plugin here"
)
def test_docker_compose_reads_the_compose_file() -> None:
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.skipif(not _docker_answers("info"), reason="no Docker daemon runs here")
def test_the_agent_image_builds() -> None:
    done = subprocess.run(
        ["docker", "build", "--platform", "linux/arm64", "-f", str(DOCKERFILE)]
        + ["--target", "agent", "-t", "edgeflex-agent:test", str(PROJECT_ROOT)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
