"""A simulation on an existing Ray cluster: two Ray nodes on this machine (``ray start --head``
and ``ray start --address``, one CPU each, on loopback), ``RAY_ADDRESS`` naming the head, and a
short run whose client actors (one CPU each) must use both nodes and whose records must equal
the same run's on the default backend."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands.processes import stop_session
from commands.run import RAY_ADDRESS, free_port, run
from commands.run_config import parse_overrides
from server.records import read_rounds, without_wall_clock

pytestmark = pytest.mark.slow  # starts a Ray cluster and a simulation

RAY = str(Path(sys.executable).parent / "ray")
ACTORS_BY_NODE = """
import collections, json, ray
from ray._private import state
ray.init(address="{address}", logging_level="ERROR")
nodes = {{n["NodeID"] for n in ray.nodes() if n["Alive"]}}
clients = [a for a in state.actors().values() if "ClientAppActor" in a["ActorClassName"]]
actors = collections.Counter(a["Address"]["NodeID"] for a in clients)
print(json.dumps({{"nodes": sorted(nodes), "actors": actors}}))
"""


def _ray_node(*args: str, temp_dir: Path) -> subprocess.Popen[bytes]:
    """A Ray node in the foreground (``--block``), in a process group of its own."""
    return subprocess.Popen(
        [
            RAY,
            "start",
            "--block",
            "--num-cpus=1",
            "--object-store-memory=200000000",  # not Ray's 30 % of the machine per node
            "--disable-usage-stats",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "RAY_TMPDIR": str(temp_dir)},
    )


def _probe(address: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", ACTORS_BY_NODE.format(address=address)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.fixture
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A head and a worker node on loopback; their address; both stopped by process group."""
    temp_dir = Path("/tmp") / f"edgeflex-ray-{os.getpid()}"  # Ray's socket paths stay short
    temp_dir.mkdir(exist_ok=True)
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [
        _ray_node(
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
            temp_dir=temp_dir,
        )
    ]
    try:
        deadline = time.monotonic() + 120
        while len(_probe_nodes(address)) < 1:
            assert time.monotonic() < deadline and nodes[0].poll() is None, "no Ray head"
            time.sleep(1)
        nodes.append(
            _ray_node(f"--address={address}", "--node-ip-address=127.0.0.1", temp_dir=temp_dir)
        )
        while len(_probe_nodes(address)) < 2:
            assert time.monotonic() < deadline and nodes[1].poll() is None, "no second Ray node"
            time.sleep(1)
        yield address
    finally:
        for node in reversed(nodes):
            stop_session(node)
        subprocess.run(["rm", "-rf", str(temp_dir)], check=False)


def _probe_nodes(address: str) -> list[str]:
    try:
        return list(_probe(address)["nodes"])  # type: ignore[call-overload]
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError, IndexError):
        return []


RUN = "num-clients=4 num-server-rounds=3 round-timeout-s=60 collective=allgather"


def _run(tmp_path: Path, name: str, extra: str = "") -> list[dict[str, object]]:
    """The run's records, wall clock aside."""
    overrides = parse_overrides(f"{RUN} {extra} results-dir={tmp_path / name}")
    with (tmp_path / f"{name}.log").open("w") as out:
        code, results = run(overrides, stream_to=out)
    assert code == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    return [without_wall_clock(row) for row in read_rounds(results)]


def test_a_simulation_runs_its_clients_on_every_node_of_an_existing_ray_cluster(
    ray_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RAY_ADDRESS, ray_cluster)
    store = tmp_path / "store"  # shared by both Ray nodes: one machine
    on_cluster = _run(tmp_path, "cluster", f"state-store=disk state-store-dir={store}")
    assert len(on_cluster) == 3
    assert store.is_dir() and not any(store.iterdir())  # removed at the end
    held = re.search(
        r"state store held (\d+) clients' vectors", (tmp_path / "cluster.log").read_text()
    )
    assert held is not None and int(held.group(1)) == 4  # the actors wrote there, on both nodes
    seen = _probe(ray_cluster)
    actors: dict[str, int] = seen["actors"]  # type: ignore[assignment]
    assert len(seen["nodes"]) == 2  # type: ignore[arg-type]
    assert set(actors) == set(seen["nodes"])  # type: ignore[arg-type]  # a client actor on each
    # The same run on the default backend (Ray started for it on this machine), its clients'
    # vectors in memory, records the same: where a client's actor runs and where it keeps its
    # vectors change nothing it computes.
    monkeypatch.delenv(RAY_ADDRESS)
    assert _run(tmp_path, "default") == on_cluster
