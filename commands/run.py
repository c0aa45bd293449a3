"""Run one experiment as a local Flower simulation, and clean up after it.

    python -m commands.run --run-config 'num-server-rounds=3 seed=7 results-dir=/tmp/x'
    python -m commands.run --run-config configs/NAME.toml
    python -m commands.run --run-config 'configs/scadles.toml seed=7'
    python -m commands.run --check --run-config configs/scadles.toml   # validate and print

What it does, in order:
1. validates the run config (pyproject defaults + overrides) before anything starts;
2. starts its own ``flower-superlink --simulation`` on a free loopback port, with a
   project-local FLWR_HOME and runtime dependency installation disabled;
3. runs ``flwr run . <connection> --stream`` with ``num-supernodes = num-clients``;
4. shows one progress bar (round, accuracy, virtual time, MB, ETA) and error lines, and
   writes everything Flower prints to ``results-dir/flower.log`` (``--verbose``: shows it);
5. stops that SuperLink by its PID (its whole process group) when the run ends, fails or is
   interrupted, and reports the result and where the records are.
Exit code 0 only when the run wrote its ``summary.json``: ``flwr run --stream`` exits 0
whatever became of the run (it streams the logs until the run ends and never asks how it
ended), so a ServerApp that failed or stopped early is caught here. Exit code 2: a bad
configuration, refused before anything starts or is written (``--check``: only that).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from commands.app_bundle import stage_app
from commands.flwr_home import environment
from commands.processes import stop_tree
from commands.progress import RunOutput
from commands.run_config import (
    describe_model,
    format_overrides,
    parse_overrides,
    resolve_settings,
    resolved_text,
)
from common.accelerator import ray_gpus_per_client
from common.settings import PROJECT_ROOT, ConfigError, Settings
from state.store import store_root, sweep_abandoned

CONNECTION = "edgeflex-local"
FLOWER_LOG = "flower.log"  # what `flwr run --stream` printed: Flower's and the ServerApp's lines
FLWR_DIR = PROJECT_ROOT / ".flwr"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flower_env(flwr_home: Path) -> dict[str, str]:
    env = os.environ | environment(flwr_home)
    env.update({"FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_DEDUP_LOGS": "0"})
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def healthy(port: int, ca_file: Path | None = None) -> bool:
    scheme = "http" if ca_file is None else "https"
    context = None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(
            f"{scheme}://127.0.0.1:{port}/health", timeout=1.0, context=context
        ) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def local_superlink(
    flwr_home: Path,
    log_path: Path,
    timeout_s: float = 60.0,
    *,
    simulation: bool = True,
    tls_args: list[str] | None = None,
    ca_file: Path | None = None,
    command: Sequence[str] = ("flower-superlink",),
    extra_env: Mapping[str, str] | None = None,
) -> Iterator[int]:
    """A ``flower-superlink`` of our own on loopback; yields its port.

    ``simulation``: the simulation runtime (else SuperNodes connect to it); ``tls_args``:
    its TLS and authentication flags (None: ``--insecure``), ``ca_file`` to check it with;
    ``command``: what starts it (``benchmarks.count_requests`` counts its requests);
    ``extra_env``: more variables for it and its runs (``RAY_ADDRESS``).
    """
    port = free_port()
    env = {**flower_env(flwr_home), **(extra_env or {})}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                *command,
                *(["--insecure"] if tls_args is None else tls_args),
                *(["--simulation"] if simulation else []),
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us, not it: we stop it ourselves
            cwd=PROJECT_ROOT,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not healthy(port, ca_file):
            if proc.poll() is not None:
                raise RuntimeError(f"flower-superlink exited early; see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"flower-superlink not ready after {timeout_s:.0f} s")
            time.sleep(0.2)
        yield port
    finally:
        stop_tree(proc)


def write_connection(flwr_home: Path, port: int, ca_file: Path | None = None) -> None:
    """The ``flwr`` CLI's connection to our SuperLink: insecure, or TLS checked against
    ``ca_file``."""
    flwr_home.mkdir(parents=True, exist_ok=True)
    security = "insecure = true" if ca_file is None else f'root-certificates = "{ca_file}"'
    (flwr_home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{port}"\n{security}\n'
    )


RAY_ADDRESS = "RAY_ADDRESS"  # Ray's own variable: an existing cluster to run the clients on
LOCAL_CPUS = 2  # Ray's CPUs on this machine: one client actor each


def federation_config(settings: Settings, joins_cluster: bool | None = None) -> str:
    """One CPU per client actor, Ray's own logs out of the run's output; on this machine's
    two cores two actors, or on an existing Ray cluster (``joins_cluster``; None: whether
    ``RAY_ADDRESS`` names one; it decides its CPUs: Ray refuses num-cpus when it joins a
    cluster) as many as its CPUs hold. Where ``device`` resolves to CUDA here, each actor asks
    for 1 / LOCAL_CPUS of a GPU: two actors share one GPU (an actor that asks for none is not
    shown the GPU)."""
    config = f"num-supernodes={settings.run.num_clients} client-resources-num-cpus=1 "
    gpus = ray_gpus_per_client(settings.training.device, LOCAL_CPUS)
    if gpus:
        config += f"client-resources-num-gpus={gpus} "
    if joins_cluster is None:
        joins_cluster = bool(os.environ.get(RAY_ADDRESS))
    if not joins_cluster:
        config += f"init-args-num-cpus={LOCAL_CPUS} "
    return config + "init-args-log-to-driver=false"


def explicit_overrides(settings: Settings, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """What ``flwr run --run-config`` is given: the keys asked for, as resolved (paths made
    absolute), and the results directory."""
    explicit = {k: v for k, v in settings.to_run_config().items() if k in overrides}
    explicit["results-dir"] = settings.run.results_dir
    return explicit


def run(
    overrides: Mapping[str, Any], *, stream_to: Any = None, verbose: bool = False
) -> tuple[int, Path]:
    """Run one simulation; return (exit code, results dir). Flower's output goes to
    ``results-dir/flower.log`` and the terminal shows a progress bar and error lines (all of
    it with ``verbose``); ``stream_to``: a file for all of it instead, no bar."""
    settings = resolve_settings(overrides)
    print(describe_model(settings), file=stream_to or sys.stdout, flush=True)
    run_config = format_overrides(explicit_overrides(settings, overrides))
    results_dir = Path(settings.run.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    # One FLWR_HOME per run, named after this process, so runs never share Flower state.
    flwr_home = FLWR_DIR / f"home-{os.getpid()}-{time.monotonic_ns()}"
    print("edgeflex: starting SuperLink", file=stream_to or sys.stdout, flush=True)
    try:
        with local_superlink(flwr_home, results_dir / "superlink.log") as port:
            write_connection(flwr_home, port)
            cmd = [
                "flwr",
                "run",
                str(stage_app(flwr_home / "app")),
                CONNECTION,
                "--stream",
                "--run-config",
                run_config,
                "--federation-config",
                federation_config(settings),
            ]
            if stream_to is not None:
                code = subprocess.call(
                    cmd,
                    env=flower_env(flwr_home),
                    cwd=PROJECT_ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=stream_to,
                    stderr=subprocess.STDOUT,
                )
            else:
                code = _run_with_progress(
                    cmd,
                    flwr_home,
                    results_dir / FLOWER_LOG,
                    settings.run.num_server_rounds,
                    verbose,
                )
    finally:
        shutil.rmtree(flwr_home, ignore_errors=True)
        # a run stopped by a signal exits without its clean-up: its state store goes here
        sweep_abandoned(store_root(settings.deployment.state_store_dir))
    if code == 0 and not (results_dir / "summary.json").exists():
        code = 1  # flwr run exits 0 however the run ended: no summary, no finished run
    return code, results_dir


def _run_with_progress(
    cmd: list[str], flwr_home: Path, log_path: Path, num_rounds: int, verbose: bool
) -> int:
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            env=flower_env(flwr_home),
            cwd=PROJECT_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        try:
            with RunOutput(log, num_rounds, verbose=verbose) as output:
                for line in proc.stdout:
                    output.feed(line)
            return proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: the SuperLink's stop ends it too
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)


def _tail(path: Path, lines: int = 25) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _raise_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


CONFIG_ERROR = 2  # the exit code of a configuration refused before anything started


def refused(exc: ConfigError) -> int:
    print(f"edgeflex: bad configuration: {exc}", file=sys.stderr)
    return CONFIG_ERROR


def check(run_config: str) -> int:
    """``--check``: validate ``run_config`` as a run would, print the resolved configuration
    (a preset ``--run-config`` reads back: key = value by section) and start nothing."""
    try:
        settings = resolve_settings(parse_overrides(run_config))
        model = describe_model(settings)
        text = resolved_text(settings)
    except ConfigError as exc:
        return refused(exc)
    print(f"# {model}\n{text}", end="")
    return 0


def launch(
    start: Callable[[dict[str, Any]], tuple[int, Path]],
    run_config: str,
    *,
    stopped: str,
    logs: str,
) -> int:
    """A launcher's command line: parse the run config, ``start`` it, report; Ctrl-C and
    SIGTERM stop everything it started. ``stopped`` names what was stopped, ``logs`` (a
    format with ``{results_dir}``) where to look after a failure."""
    # Clean up on Ctrl-C and on SIGTERM even where the caller started us with SIGINT ignored
    # (a background job of a non-interactive shell).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        code, results_dir = start(parse_overrides(run_config))
    except ConfigError as exc:
        return refused(exc)
    except KeyboardInterrupt:
        print(f"edgeflex: interrupted; {stopped} stopped", file=sys.stderr)
        return 130
    if code == 0:
        summary = json.loads((results_dir / "summary.json").read_text())
        print(
            f"edgeflex: {summary['rounds']} rounds, final accuracy "
            f"{summary['final_accuracy']:.4f} (best {summary['best_accuracy']:.4f}), virtual "
            f"time {summary['virtual_time_s']:.1f} s, "
            f"{(summary['bytes_up'] + summary['bytes_down']) / 1e6:.1f} MB"
        )
        print(f"edgeflex: records in {results_dir} (rounds.jsonl, summary.json, accuracy.png)")
    else:
        tail = _tail(results_dir / FLOWER_LOG)
        if tail:
            print(f"edgeflex: the end of {results_dir / FLOWER_LOG}:\n{tail}", file=sys.stderr)
        print(
            f"edgeflex: the run failed (exit {code}); see " + logs.format(results_dir=results_dir),
            file=sys.stderr,
        )
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-config", default="", help="'key=value ...' or a TOML file")
    parser.add_argument(
        "--verbose", action="store_true", help="show Flower's lines, not a progress bar"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="validate, print the resolved configuration and exit, starting nothing",
    )
    args = parser.parse_args(argv)
    if args.check:
        return check(args.run_config)
    return launch(
        functools.partial(run, verbose=args.verbose),
        args.run_config,
        stopped="the SuperLink was",
        logs=f"{{results_dir}}/{FLOWER_LOG} and {{results_dir}}/superlink.log",
    )


if __name__ == "__main__":
    sys.exit(main())
