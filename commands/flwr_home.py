"""``flwr run .`` as a Flower user types it: a FLWR_HOME in the repository, runtime installs off.

    .venv/bin/python -m commands.flwr_home setup   # make venv runs it
    . .venv/bin/activate && flwr run . --stream   # a local simulation of the default config
    .venv/bin/python -m commands.flwr_home stop    # stop the SuperLink that flwr left running

``setup`` writes ``.flwr/home/config.toml`` (git-ignored): a default SuperLink connection,
``edgeflex``, to Flower's managed local simulation SuperLink with one simulated SuperNode per
``num-clients`` of the defaults, one CPU per client and Ray's logs kept out. It also adds to
the virtual environment's ``activate`` the two variables ``flwr`` needs here: FLWR_HOME, and
FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 (otherwise Flower installs the app's
dependencies with uv, which pulls a multi-GB CUDA build of torch).

``flwr run`` starts that SuperLink in the background and leaves it running for the next run
(Flower's design); ``stop`` ends it and what it started, found by the FLWR_HOME in their
command lines, by PID.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psutil

from commands.processes import stop_pids
from common.settings import PROJECT_ROOT, default_run_config

HOME = PROJECT_ROOT / ".flwr" / "home"
CONNECTION = "edgeflex"
BEGIN = "# >>> edgeflex: flwr run . <<<"
END = "# <<< edgeflex: flwr run . >>>"


def flower_config(num_supernodes: int) -> str:
    return f"""[superlink]
default = "{CONNECTION}"

# Flower's managed local simulation SuperLink (started by `flwr run`, left running).
[superlink.{CONNECTION}]
address = ":local-in-memory:"
options.num-supernodes = {num_supernodes}  # = num-clients in pyproject.toml
options.backend.client-resources.num-cpus = 1
options.backend.init-args.num-cpus = {os.cpu_count() or 1}
options.backend.init-args.log-to-driver = false
"""


def environment(home: Path) -> dict[str, str]:
    """The variables ``flwr run .`` needs here."""
    return {
        "FLWR_HOME": str(home),
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "FLWR_TELEMETRY_ENABLED": "0",
    }


def activate_block(home: Path) -> str:
    exports = "".join(f'export {k}="{v}"\n' for k, v in environment(home).items())
    return f"{BEGIN}\n{exports}{END}\n"


def setup(home: Path = HOME, activate: Path | None = None) -> None:
    """Write ``home/config.toml``; put the variables into ``activate`` (replacing an older
    block of ours, so running it again changes nothing)."""
    home.mkdir(parents=True, exist_ok=True)
    num_clients = int(default_run_config()["num-clients"])
    (home / "config.toml").write_text(flower_config(num_clients))
    activate = activate or Path(sys.prefix) / "bin" / "activate"
    if not activate.is_file():
        return
    text = activate.read_text()
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + text[text.index(END) + len(END) + 1 :]
    activate.write_text(text + activate_block(home))


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
    parser.add_argument("action", choices=("setup", "stop"))
    args = parser.parse_args(argv)
    if args.action == "setup":
        setup()
        print(f"edgeflex: FLWR_HOME {HOME}: `. .venv/bin/activate && flwr run . --stream`")
    else:
        print(f"edgeflex: stopped {stop()} Flower processes of {HOME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
