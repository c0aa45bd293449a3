"""A run's configuration from text: presets and ``key=value`` pairs over pyproject's defaults,
validated before anything starts (``resolve_settings``), and back to text for a child
process (``format_overrides``)."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from commands.app_bundle import bundle_includes
from common import local_files
from common.accelerator import resolve
from common.data import DataSpec, data_spec, is_made_here
from common.hub import hub_problem
from common.models import MODELS, check_model_fits
from common.settings import (
    PROJECT_ROOT,
    REFERENCE,
    ConfigError,
    Settings,
    default_run_config,
    joined_errors,
)
from common.settings.schema import key
from common.workload import Workload, check_workload
from server.checkpoint import checkpoint_file
from server.records import default_results_dir
from timing.devices import load_catalog
from timing.network import load_schedule

_PAIR = re.compile(r"""(\S+?)=('[^']*'|"[^"]*"|\S+)""")


def parse_overrides(text: str | None) -> dict[str, Any]:
    """Presets and pairs: ``"configs/scadles.toml seed=7 k2=v2"``.

    Every bare ``*.toml`` word is a preset file (relative paths from the project), applied in
    order; then the ``key=value`` pairs (values in TOML syntax, bare words taken as strings).
    """
    if not text or not text.strip():
        return {}
    pairs = _PAIR.findall(text)
    out: dict[str, Any] = {}
    for word in _PAIR.sub("", text).split():
        if not word.endswith(".toml"):
            raise ConfigError(
                f"cannot parse run-config text {word!r}; expected key=value pairs or a .toml file"
            )
        path = Path(word)
        if not path.is_absolute() and not path.exists():
            path = PROJECT_ROOT / path
        if not path.is_file():
            raise ConfigError(f"run-config preset {word!r} not found")
        try:
            with path.open("rb") as fh:
                out.update(_flatten(tomllib.load(fh)))
        except tomllib.TOMLDecodeError as exc:  # its message says "(at line L, column C)"
            raise ConfigError(f"run-config preset {path}: {exc}") from None
    for name, raw in pairs:
        try:
            out[name] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[name] = raw  # a bare word such as a path or a name
    return out


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part, value in table.items():
        name = f"{prefix}{part}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def resolve_settings(overrides: Mapping[str, Any], now: float | None = None) -> Settings:
    """Defaults + overrides, validated; ``results-dir`` (default timestamped) and ``resume-from``
    made absolute: the clients of a resumed simulation read their state from there."""
    config = default_run_config()
    config.update(overrides)
    settings = Settings.from_run_config(config)
    results = (
        Path(settings.run.results_dir)
        if settings.run.results_dir
        else (PROJECT_ROOT / default_results_dir(settings.collective.collective, now))
    )
    if not results.is_absolute():
        results = PROJECT_ROOT / results
    config["results-dir"] = str(results)
    if settings.run.resume_from and not Path(settings.run.resume_from).is_absolute():
        config["resume-from"] = str(PROJECT_ROOT / settings.run.resume_from)
    config["dataset"] = local_files.absolute(settings.data.dataset, Path.cwd())
    settings = Settings.from_run_config(config)
    # What the schema cannot see (files, the model, the hub): every problem at once, each
    # naming its key first (a file's own error names the file: the key goes in front).
    errors: list[ConfigError] = []
    for names, check in _CHECKS:
        try:
            check(settings)
        except ConfigError as exc:
            message = str(exc)
            if not message.startswith(names):
                message = f"{names[0]} = {config[names[0]]!r}: {message}"
            errors.append(type(exc)(message))  # its kind kept (DataFileError, ...)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigError(joined_errors(str(e) for e in errors))
    return settings


def _check_places(settings: Settings) -> None:
    """The results directory can be made; the run to resume has a checkpoint."""
    results = Path(settings.run.results_dir)
    existing = next(p for p in (results, *results.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"results-dir = {str(results)!r} cannot be made: {existing} is not a directory "
            "this user may write to"
        )
    if settings.run.resume_from:
        checkpoint_file(Path(settings.run.resume_from))


def _check_data_and_model(settings: Settings) -> None:
    check_model_module(settings.training.model)
    if is_made_here(settings.data.dataset):  # a local file is read now: errors before anything
        check_model(settings)
        return
    problem = hub_problem(settings.data.dataset)
    if problem is not None:
        raise ConfigError(problem)


def _check_device(settings: Settings) -> None:
    """The clients this launcher starts train on this machine: its accelerator must exist."""
    try:
        resolve(settings.training.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_devices(settings: Settings) -> None:
    load_catalog(PROJECT_ROOT / settings.timing.devices_file).assign(
        settings.timing.device_mix, settings.run.num_clients
    )


def _check_network(settings: Settings) -> None:
    load_schedule(
        PROJECT_ROOT / settings.timing.networks_file,
        settings.timing.network,
        settings.run.num_clients,
        settings.run.seed,
    )


def _check_flwr_can_carry(settings: Settings) -> None:
    """Every value travels to the ServerApp as ``flwr run --run-config`` text."""
    format_overrides(settings.to_run_config())


# (the keys a check is about, the check)
_CHECKS: tuple[tuple[tuple[str, ...], Callable[[Settings], None]], ...] = (
    (tuple(Settings.keys()), _check_flwr_can_carry),
    (("results-dir", "resume-from"), _check_places),
    (("dataset", "model"), _check_data_and_model),
    (("device",), _check_device),
    (("devices-file", "device-mix"), _check_devices),
    (("networks-file", "network"), _check_network),
)


def check_model_module(model: str, project: Path = PROJECT_ROOT) -> None:
    """A ``package.module:factory`` model is imported by the ServerApp and the ClientApps from
    the app bundle (FAB) or the environment, not from this directory: a module of the project
    that the bundle does not hold, or one found through the current directory only, is
    refused. An import that fails is left to ``check_model``, which names it."""
    if model in MODELS or not REFERENCE.match(model):
        return
    module = model.split(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        return
    origin = Path(spec.origin).resolve()
    how = (
        'move it into a directory of its own and add "DIR/**/*.py" to fab-include under '
        "[tool.flwr.app] in pyproject.toml, or install it as a package in the environment of "
        "the server and of every node (docs/data-and-models.md#your-own-model)"
    )
    if origin.is_relative_to(project.resolve()):
        relative = origin.relative_to(project.resolve()).as_posix()
        if not bundle_includes(relative, project):
            raise ConfigError(
                f"model = {model!r}: {relative} is not in the app bundle the ServerApp and "
                f"the ClientApps import it from; {how}"
            )
        return
    cwd = Path.cwd().resolve()
    searched = {Path(p).resolve() for p in sys.path if p} - {cwd}
    if not any(origin.is_relative_to(p) for p in searched):
        raise ConfigError(
            f"model = {model!r}: {origin} is found through the current directory only, which "
            f"the ServerApp does not search; {how}"
        )


def check_model(settings: Settings) -> Workload:
    """The model builds for the data and runs a training pass (its FLOPs counted), or
    ConfigError."""
    return _checked(settings.training.model, data_spec(settings))


# Once per model and data shape: resolve_settings checks, describe_model reports, and a
# comparison resolves every run under every seed (a residual CNN's FLOP count takes seconds).
@functools.cache
def _checked(model: str, spec: DataSpec) -> Workload:
    check_model_fits(model, spec)
    try:
        return check_workload(model, spec, seed=0)  # the seed changes weights, not the shape
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def describe_model(settings: Settings) -> str:
    """One line for the terminal: the model's size and training FLOPs per sample."""
    if not is_made_here(settings.data.dataset):
        return f"edgeflex: model {settings.training.model} (checked by the ServerApp: hub data set)"
    workload = check_model(settings)
    return (
        f"edgeflex: model {workload.model}: {workload.parameters:,} parameters, "
        f"{workload.train_flops_per_sample / 1e6:.3f} MFLOP per training sample"
    )


def toml_value(value: Any, name: str = "value") -> str:
    """``value`` as TOML that ``flwr run --run-config`` reads back; ``name``: its key."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if '"' in text or "\\" in text:
        raise ConfigError(
            f"{name} = {text!r}: a string may not contain quotes or backslashes (flwr run "
            "--run-config cannot carry them)"
        )
    return f'"{text}"'


def format_overrides(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={toml_value(v, k)}" for k, v in config.items())


def resolved_text(settings: Settings) -> str:
    """Every key = value of ``settings``, by section in the schema's order, each section under
    a comment: a preset that ``--run-config`` reads back."""
    lines = []
    for section, values in settings.model_dump().items():
        lines.append(f"# {section}")
        lines += [f"{key(k)} = {toml_value(v, key(k))}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
