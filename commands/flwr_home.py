"""``flwr run .`` as a Flower user types it: a FLWR_HOME in the repository, runtime installs off.

    .venv/bin/python -m commands.flwr_home setup   # make venv runs it
    . .venv/bin/activate
    python -m commands.flwr_home start    # Flower's local SuperLink, with edgeflex's simulation
    flwr run . --stream                   # a local simulation of the default config
    python -m commands.flwr_home stop     # stop the SuperLink that flwr left running

``setup`` writes ``.flwr/home/config.toml`` (git-ignored): a default SuperLink connection,
``edgeflex``, to Flower's managed local simulation SuperLink, as Flower 1.28+ wants it: an
address and no ``options.`` fields (flwr 1.42 warns they are deprecated). It also adds to the
virtual environment's ``activate`` the variables ``flwr`` needs here: FLWR_HOME,
FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 (otherwise Flower installs the app's
dependencies with uv, which pulls a multi-GB CUDA build of torch), and ``RAY_ENV``. It starts
nothing.

A simulation's settings live in the SuperLink that runs it (Flower 1.28+). ``start`` sets them
with ``flwr federation simulation-config``, which starts Flower's managed SuperLink when it is
not running: one simulated SuperNode per ``num-clients`` of the defaults (or
``--num-supernodes N``), one CPU per client, Ray's logs kept out. The SuperLink keeps them in
memory only (flwr 1.42's ``NoOpFederationManager``): after ``stop`` (or a reboot) ``start``
sets them again, and a ``flwr run`` in between gets Flower's defaults (2 SuperNodes, 2 CPUs
each). A single run can
instead pass them itself: ``flwr run . --stream --federation-config "num-supernodes=N"``.

``flwr run`` leaves that SuperLink running for the next run (Flower's design); ``stop`` ends
it and what it started, found by the FLWR_HOME in their command lines, by PID.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import psutil

from commands.processes import stop_pids
from common.settings import PROJECT_ROOT, default_run_config

HOME = PROJECT_ROOT / ".flwr" / "home"
CONNECTION = "edgeflex"
BEGIN = "# >>> edgeflex: flwr run . <<<"
END = "# <<< edgeflex: flwr run . >>>"

# Ray carries a task's arguments and results up to this size inside the task's own message,
# larger ones through its shared-memory object store, which the raylet serves. At Ray's 100 kB
# every message of a model above 25,000 parameters went through the store: with the default
# MLP about 3.5 ms of raylet CPU per message, a third of a simulated round (docs/results/fedavg.md).
# 4 MiB holds the models of configs/ but mlp-11m; it stays under Ray's 10 MB limit a task's
# inlined arguments share. Every process of a simulation's Ray must see it: the SuperLink's
# environment, or the ``ray start`` of each node of a cluster of one's own (RAY_ADDRESS; without
# it there, the driver sends messages inline but the actors reply through the store).
RAY_INLINE = "RAY_max_direct_call_object_size"
RAY_ENV = {RAY_INLINE: os.environ.get(RAY_INLINE, str(4 << 20))}  # a value set already wins


def flower_config() -> str:
    return f"""[superlink]
default = "{CONNECTION}"

# Flower's managed local simulation SuperLink (started by `flwr run`, left running); its
# simulation settings: `python -m commands.flwr_home start`.
[superlink.{CONNECTION}]
address = ":local-in-memory:"
"""


def simulation_settings(num_supernodes: int) -> dict[str, str]:
    """What ``start`` gives the SuperLink's simulations: ``num_supernodes`` simulated
    SuperNodes, one CPU per client, all CPUs to Ray, Ray's logs kept out of the run's."""
    return {
        "num-supernodes": str(num_supernodes),
        "client-resources-num-cpus": "1",
        "init-args-num-cpus": str(os.cpu_count() or 1),
        "init-args-log-to-driver": "false",
    }


def environment(home: Path) -> dict[str, str]:
    """The variables ``flwr run .`` needs here."""
    return {
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
        **RAY_ENV,
    }


def activate_block(home: Path) -> str:
    exports = "".join(f'export {k}="{v}"\n' for k, v in environment(home).items())
    return f"{BEGIN}\n{exports}{END}\n"


def setup(home: Path = HOME, activate: Path | None = None) -> None:
    """Write ``home/config.toml``; put the variables into ``activate`` (replacing an older
    block of ours, so running it again changes nothing)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(flower_config())
    activate = activate or Path(sys.prefix) / "bin" / "activate"
    if not activate.is_file():
        return
    text = activate.read_text()
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + text[text.index(END) + len(END) + 1 :]
    activate.write_text(text + activate_block(home))


def start(
    home: Path = HOME, env: Mapping[str, str] | None = None, num_supernodes: int | None = None
) -> None:
    """Set the simulation settings in Flower's managed SuperLink of ``home`` (Flower starts it
    if it is not running): ``num_supernodes`` (else ``num-clients`` of the defaults) simulated
    SuperNodes. ``env``: the environment, else this one with ``environment(home)`` and this
    interpreter's ``flwr`` first on PATH."""
    if env is None:
        bin_dir = str(Path(sys.executable).parent)
        env = os.environ | environment(home) | {"PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    if num_supernodes is None:
        num_supernodes = int(default_run_config()["num-clients"])
    options = [f"--{key}={value}" for key, value in simulation_settings(num_supernodes).items()]
    subprocess.run(
        ["flwr", "federation", "simulation-config", *options],
        env=env,
        cwd=home,
        stdin=subprocess.DEVNULL,
        check=True,
    )


def managed_superlinks(home: Path = HOME) -> list[int]:
    """PIDs of Flower processes whose command line names ``home`` (the managed SuperLink
    keeps its log file there), and of their children."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.pid != os.getpid() and any(str(home) in word for word in cmdline):
            found.append(proc.pid)
    return found


def stop(home: Path = HOME) -> int:
    pids = managed_superlinks(home)
    stop_pids(pids)
    return len(pids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("setup", "start", "stop"))
    parser.add_argument(
        "--num-supernodes", type=int, help="start: for runs of this num-clients (default: 10)"
    )
    args = parser.parse_args(argv)
    if args.num_supernodes is not None and args.num_supernodes < 1:
        parser.error(f"--num-supernodes must be at least 1, got {args.num_supernodes}")
    if args.action == "setup":
        setup()
        print(
            f"edgeflex: FLWR_HOME {HOME}: `. .venv/bin/activate && python -m "
            "commands.flwr_home start && flwr run . --stream`"
        )
    elif args.action == "start":
        try:
            start(num_supernodes=args.num_supernodes)
        except subprocess.CalledProcessError as exc:
            print(f"edgeflex: flwr federation simulation-config failed ({exc.returncode})")
            return 1
        print(f"edgeflex: Flower's local SuperLink of {HOME} is set for the simulations")
    else:
        print(
            f"edgeflex: stopped {stop()} Flower processes of {HOME} (their simulation "
            "settings too: `start` sets them again)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
