"""`flwr run .` as a Flower user types it, with the FLWR_HOME `make venv` sets up: a local
simulation, runtime installs off, and nothing left running after `commands.flwr_home stop`."""

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from commands import flwr_home
from commands.run import free_port
from common.settings import PROJECT_ROOT

pytestmark = pytest.mark.slow  # starts processes


def test_setup_writes_the_connection_and_the_variables_once(tmp_path: Path) -> None:
    activate = tmp_path / "activate"
    activate.write_text("# a venv's activate\n")
    flwr_home.setup(tmp_path / "home", activate)
    flwr_home.setup(tmp_path / "home", activate)  # again: nothing doubles
    config = tomllib.loads((tmp_path / "home" / "config.toml").read_text())
    connection = config["superlink"][config["superlink"]["default"]]
    assert connection == {"address": ":local-in-memory:"}  # no options. (deprecated in 1.42)
    text = activate.read_text()
    assert text.startswith("# a venv's activate\n") and text.count(flwr_home.BEGIN) == 1
    assert 'export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1"' in text
    assert f'export FLWR_HOME="{tmp_path / "home"}"' in text


def test_flwr_run_dot_runs_a_local_simulation_and_stop_ends_its_superlink(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    flwr_home.setup(home, tmp_path / "no-activate")
    env = os.environ | flwr_home.environment(home)
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
        # Flower's managed SuperLink listens on fixed ports unless told: free ones, for tests
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_bytes()
    results = tmp_path / "results"

    def flwr_run(num_clients: int, results: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "flwr",
                "run",
                ".",
                "--stream",
                "--run-config",
                f'num-server-rounds=2 num-clients={num_clients} results-dir="{results}"',
            ],
            cwd=PROJECT_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
        )

    try:
        # The simulation settings live in the SuperLink, set as Flower 1.28+ wants it (its
        # default, 2 SuperNodes, would fail a run of 3 clients).
        flwr_home.start(home, env, num_supernodes=3)
        done = flwr_run(3, results)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "deprecated" not in done.stdout + done.stderr
        assert "edgeflex: round    2/2" in done.stdout
        assert (results / "summary.json").is_file()
        assert flwr_home.managed_superlinks(home)  # Flower left its SuperLink running
        # more clients than simulated nodes: the ServerApp says so as it starts (it waited
        # round-timeout-s, 600 s); flwr run exits 0 whatever became of the run
        done = flwr_run(4, tmp_path / "too-many")
        assert "num-clients = 4 but this simulation has 3 nodes" in done.stdout, done.stdout
        assert done.returncode == 0 and not (tmp_path / "too-many").exists()
    finally:
        flwr_home.stop(home)
    assert flwr_home.managed_superlinks(home) == []
    assert (PROJECT_ROOT / "pyproject.toml").read_bytes() == pyproject  # not rewritten
