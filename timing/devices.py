"""Device profiles (compute throughput and link) and the mixes that assign them to clients.

A device's compute is charged from the model's work: a local round of ``steps`` SGD steps over
``samples`` samples takes steps x step overhead + samples x FLOPs per sample / FLOP/s, with the
FLOPs per sample counted from the model (common/workload.py). Each preset says which hardware
its figures assume (``hardware``): a deployed device trains there (its agent's ``--device``).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.settings import ConfigError

MBPS = 1e6 / 8.0  # bytes per second in one megabit per second

GFLOPS = 1e9
HARDWARE = ("cpu", "gpu")  # what a preset's compute figures were measured or estimated on
PRESET_FIELDS = {
    "description": str,
    "source": str,
    "train-gflops": float,
    "step-overhead-ms": float,
    "uplink-mbps": float,
    "downlink-mbps": float,
    "latency-ms": float,
    "hardware": str,
}
REQUIRED_PRESET_FIELDS = (
    "source",
    "train-gflops",
    "step-overhead-ms",
    "uplink-mbps",
    "downlink-mbps",
    "latency-ms",
    "hardware",
)
NON_NEGATIVE_FIELDS = ("step-overhead-ms", "latency-ms")  # the others must be > 0
ALLOWED_VALUES = {"hardware": HARDWARE}  # text fields with a fixed set of values


class DeviceConfigError(ConfigError):
    """A devices file is malformed; the message names the file, line and field."""


@dataclass(frozen=True)
class DeviceProfile:
    """One device and its link, in SI units (FLOP/s, bytes/s, seconds)."""

    name: str
    train_flops_per_s: float  # sustained training throughput
    step_overhead_s: float  # fixed cost of one SGD step (dispatch, optimizer, data handling)
    uplink_bytes_per_s: float
    downlink_bytes_per_s: float
    latency_s: float
    hardware: str = HARDWARE[0]  # of the compute figures; the clock does not read it

    def __post_init__(self) -> None:
        if self.hardware not in HARDWARE:
            raise ValueError(
                f"device {self.name!r}: hardware must be one of {', '.join(HARDWARE)}, "
                f"got {self.hardware!r}"
            )
        for label, value in (
            ("train throughput", self.train_flops_per_s),
            ("uplink bandwidth", self.uplink_bytes_per_s),
            ("downlink bandwidth", self.downlink_bytes_per_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"device {self.name!r}: {label} must be > 0, got {value}")
        for label, value in (("latency", self.latency_s), ("step overhead", self.step_overhead_s)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"device {self.name!r}: {label} must be >= 0, got {value}")

    def compute_s(self, samples: int, steps: int, flops_per_sample: float) -> float:
        """Seconds to train ``steps`` SGD steps over ``samples`` samples in all."""
        return steps * self.step_overhead_s + samples * flops_per_sample / self.train_flops_per_s


@dataclass(frozen=True)
class DeviceCatalog:
    presets: Mapping[str, DeviceProfile]
    mixes: Mapping[str, tuple[str, ...]]

    def assign(self, mix: str, num_clients: int) -> dict[int, DeviceProfile]:
        """Profiles by partition id: client i gets the mix's preset i mod len(mix)."""
        if mix not in self.mixes:
            raise DeviceConfigError(
                f"device-mix = {mix!r} is not defined; allowed values: {', '.join(self.mixes)}"
            )
        names = self.mixes[mix]
        return {i: self.presets[names[i % len(names)]] for i in range(num_clients)}


def line_of(text: str, header: str) -> int:
    """1-based line of a TOML table header in ``text`` (0 if absent), for error messages."""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip() == header:
            return number
    return 0


def load_catalog(path: Path) -> DeviceCatalog:
    """Read and validate a devices file (see ``configs/devices.toml``)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise DeviceConfigError(f"{path}: cannot read devices file ({exc})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeviceConfigError(f"{path}: not valid TOML ({exc})") from exc
    unknown_tables = sorted(set(data) - {"preset", "mix"})
    if unknown_tables:
        raise DeviceConfigError(f"{path}: unknown table(s) {unknown_tables}; allowed: preset, mix")
    presets = {
        name: _preset(path, name, fields, line_of(text, f"[preset.{name}]"))
        for name, fields in data.get("preset", {}).items()
    }
    mixes: dict[str, tuple[str, ...]] = {}
    for name, fields in data.get("mix", {}).items():
        where = f"{path}:{line_of(text, f'[mix.{name}]')}: mix {name!r}"
        if set(fields) != {"presets"}:
            raise DeviceConfigError(f"{where}: needs exactly one field 'presets'")
        listed = fields["presets"]
        if not isinstance(listed, list) or not listed:
            raise DeviceConfigError(f"{where}: field 'presets' must be a non-empty list")
        for preset in listed:
            if preset not in presets:
                raise DeviceConfigError(
                    f"{where}: field 'presets' names unknown preset {preset!r}; "
                    f"known presets: {', '.join(presets)}"
                )
        mixes[name] = tuple(listed)
    return DeviceCatalog(presets=presets, mixes=mixes)


def _preset(path: Path, name: str, fields: Mapping[str, Any], line: int) -> DeviceProfile:
    where = f"{path}:{line}: preset {name!r}"
    for key, value in fields.items():
        if key not in PRESET_FIELDS:
            raise DeviceConfigError(
                f"{where}: unknown field {key!r}; allowed fields: {', '.join(PRESET_FIELDS)}"
            )
        expected = PRESET_FIELDS[key]
        ok = (
            isinstance(value, str)
            if expected is str
            else (isinstance(value, int | float) and not isinstance(value, bool))
        )
        if not ok:
            raise DeviceConfigError(f"{where}: field {key!r} must be a {expected.__name__}")
    for key in REQUIRED_PRESET_FIELDS:
        if key not in fields:
            raise DeviceConfigError(f"{where}: missing field {key!r}")
        if PRESET_FIELDS[key] is str:
            if not fields[key].strip():
                raise DeviceConfigError(f"{where}: field {key!r} is empty")
            allowed = ALLOWED_VALUES.get(key)
            if allowed is not None and fields[key] not in allowed:
                raise DeviceConfigError(
                    f"{where}: field {key!r} = {fields[key]!r} is not allowed; allowed "
                    f"values: {', '.join(allowed)}"
                )
            continue
        value = float(fields[key])
        positive_needed = key not in NON_NEGATIVE_FIELDS
        if not math.isfinite(value) or value < 0 or (positive_needed and value == 0):
            bound = "> 0" if positive_needed else ">= 0"
            raise DeviceConfigError(f"{where}: field {key!r} must be {bound}, got {value}")
    return DeviceProfile(
        name=name,
        train_flops_per_s=float(fields["train-gflops"]) * GFLOPS,
        step_overhead_s=float(fields["step-overhead-ms"]) / 1000.0,
        uplink_bytes_per_s=float(fields["uplink-mbps"]) * MBPS,
        downlink_bytes_per_s=float(fields["downlink-mbps"]) * MBPS,
        latency_s=float(fields["latency-ms"]) / 1000.0,
        hardware=fields["hardware"],
    )
