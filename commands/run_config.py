"""A run's configuration from text: presets and ``key=value`` pairs over pyproject's defaults,
validated before anything starts (``resolve_settings``), and back to text for a child
process (``format_overrides``)."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common import local_files
from common.accelerator import resolve
from common.data import DataSpec, data_spec, is_made_here
from common.models import check_model_fits
from common.settings import PROJECT_ROOT, ConfigError, Settings, default_run_config
from common.workload import Workload, check_workload
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
    for key, raw in pairs:
        try:
            out[key] = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw  # a bare word such as a path or a name
    return out


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
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
    try:  # the clients this launcher starts train on this machine
        resolve(settings.training.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if is_made_here(settings.data.dataset):  # a local file is read now: errors before anything
        check_model(settings)
    load_catalog(PROJECT_ROOT / settings.timing.devices_file).assign(
        settings.timing.device_mix, settings.run.num_clients
    )
    load_schedule(
        PROJECT_ROOT / settings.timing.networks_file,
        settings.timing.network,
        settings.run.num_clients,
        settings.run.seed,
    )
    return settings


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


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if '"' in text or "\\" in text:
        raise ConfigError(f"string value {text!r} may not contain quotes or backslashes")
    return f'"{text}"'


def format_overrides(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={toml_value(v)}" for k, v in config.items())
