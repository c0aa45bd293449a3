"""Links that change: network schedules by round, with jitter, or from a recorded trace.

A schedule gives every client's link (latency, uplink and downlink bandwidth) for a round. The
device's compute throughput never changes; its link is replaced by the schedule's where the
schedule says something for that client and round. Presets live in ``configs/networks.toml``:

- ``kind = "static"``: the devices' own links.
- ``kind = "segments"``: ``segments = [[from-epoch, latency-ms, bandwidth-mbps], ...]`` for all
  clients, an epoch lasting ``rounds-per-epoch`` rounds (the paper's C1 and C2 are by epoch).
- ``kind = "trace"``: a JSON Lines file, one object per line with the numbers ``round``,
  ``client``, ``latency_ms``, ``uplink_mbps`` and ``downlink_mbps``; each line holds for that
  client from that round on. (JSON Lines, not CSV: Flower's app bundle carries no CSV file.)
Any kind takes ``jitter`` j: each round, each client's latency and bandwidths are multiplied by
independent factors drawn uniformly from [1 − j, 1 + j] with a generator seeded by the run's seed.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from common.settings import ConfigError
from timing.devices import MBPS, DeviceProfile, line_of

KINDS = ("static", "segments", "trace")
PRESET_FIELDS = ("kind", "description", "segments", "rounds-per-epoch", "jitter", "file")
TRACE_COLUMNS = ("round", "client", "latency_ms", "uplink_mbps", "downlink_mbps")


class NetworkConfigError(ConfigError):
    """A network preset or trace is malformed; the message names the file, line and field."""


@dataclass(frozen=True)
class LinkSpec:
    latency_s: float
    uplink_bytes_per_s: float
    downlink_bytes_per_s: float


@dataclass(frozen=True)
class NetworkSchedule:
    """Per-round links: ``changes[client]`` is a sorted list of (from round, link)."""

    name: str
    all_clients: tuple[tuple[int, LinkSpec], ...] = ()
    per_client: Mapping[int, tuple[tuple[int, LinkSpec], ...]] | None = None
    jitter: float = 0.0
    seed: int = 0

    def link(self, server_round: int, client: int) -> LinkSpec | None:
        """The scheduled link (before jitter), or None where the device's own link holds."""
        changes = (self.per_client or {}).get(client, self.all_clients)
        current = None
        for start, spec in changes:
            if start <= server_round:
                current = spec
        return current

    def profiles(
        self, server_round: int, devices: Mapping[int, DeviceProfile]
    ) -> dict[int, DeviceProfile]:
        """Every client's device profile with this round's link (jitter included)."""
        out = {}
        for client, device in devices.items():
            spec = self.link(server_round, client)
            profile = (
                device
                if spec is None
                else replace(
                    device,
                    latency_s=spec.latency_s,
                    uplink_bytes_per_s=spec.uplink_bytes_per_s,
                    downlink_bytes_per_s=spec.downlink_bytes_per_s,
                )
            )
            if self.jitter > 0:
                rng = np.random.default_rng([self.seed, server_round, client])
                lat, up, down = rng.uniform(1 - self.jitter, 1 + self.jitter, size=3)
                profile = replace(
                    profile,
                    latency_s=profile.latency_s * lat,
                    uplink_bytes_per_s=profile.uplink_bytes_per_s * up,
                    downlink_bytes_per_s=profile.downlink_bytes_per_s * down,
                )
            out[client] = profile
        return out


def _positive(where: str, field: str, value: Any, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NetworkConfigError(f"{where}: field {field!r} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise NetworkConfigError(f"{where}: field {field!r} must be {bound}, got {value!r}")
    return number


def load_schedule(
    path: Path, name: str, num_clients: int, seed: int, root: Path | None = None
) -> NetworkSchedule:
    """Read preset ``name`` of ``path`` and validate it (and its trace) for ``num_clients``."""
    try:
        text = path.read_text()
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise NetworkConfigError(f"{path}: cannot read network presets ({exc})") from exc
    presets = data.get("network", {})
    if name not in presets:
        raise NetworkConfigError(
            f"network = {name!r} is not defined in {path}; allowed values: {', '.join(presets)}"
        )
    fields = presets[name]
    where = f"{path}:{line_of(text, f'[network.{name}]')}: network {name!r}"
    for key in fields:
        if key not in PRESET_FIELDS:
            raise NetworkConfigError(
                f"{where}: unknown field {key!r}; allowed fields: {', '.join(PRESET_FIELDS)}"
            )
    kind = fields.get("kind")
    if kind not in KINDS:
        raise NetworkConfigError(f"{where}: field 'kind' must be one of {', '.join(KINDS)}")
    jitter = _positive(where, "jitter", fields.get("jitter", 0.0), allow_zero=True)
    if jitter >= 1:
        raise NetworkConfigError(f"{where}: field 'jitter' must be < 1, got {jitter}")
    if kind == "static":
        return NetworkSchedule(name=name, jitter=jitter, seed=seed)
    if kind == "segments":
        per_epoch = fields.get("rounds-per-epoch", 1)
        if isinstance(per_epoch, bool) or not isinstance(per_epoch, int) or per_epoch < 1:
            raise NetworkConfigError(f"{where}: field 'rounds-per-epoch' must be an integer >= 1")
        segments = fields.get("segments")
        if not isinstance(segments, list) or not segments:
            raise NetworkConfigError(f"{where}: field 'segments' must be a non-empty list")
        changes = []
        for i, segment in enumerate(segments):
            if not isinstance(segment, list) or len(segment) != 3:
                raise NetworkConfigError(
                    f"{where}: field 'segments' entry {i} must be [from-epoch, latency-ms, "
                    "bandwidth-mbps]"
                )
            epoch = segment[0]
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
                raise NetworkConfigError(
                    f"{where}: segments[{i}] from-epoch must be an integer >= 1"
                )
            latency = _positive(where, f"segments[{i}] latency-ms", segment[1], allow_zero=True)
            bandwidth = _positive(where, f"segments[{i}] bandwidth-mbps", segment[2])
            start_round = (epoch - 1) * per_epoch + 1
            spec = LinkSpec(latency / 1000.0, bandwidth * MBPS, bandwidth * MBPS)
            changes.append((start_round, spec))
        starts = [s for s, _ in changes]
        if starts != sorted(starts) or len(set(starts)) != len(starts):
            raise NetworkConfigError(f"{where}: field 'segments' must be in increasing epochs")
        return NetworkSchedule(name=name, all_clients=tuple(changes), jitter=jitter, seed=seed)
    trace_file = fields.get("file")
    if not isinstance(trace_file, str):
        raise NetworkConfigError(
            f"{where}: field 'file' (the trace, JSON Lines) is required for a trace"
        )
    trace_path = Path(trace_file)
    if not trace_path.is_absolute():
        trace_path = (root or path.parent.parent) / trace_path
    return NetworkSchedule(
        name=name, per_client=load_trace(trace_path, num_clients), jitter=jitter, seed=seed
    )


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"field(s) given twice: {', '.join(repeated)}")
    return dict(pairs)


def _trace_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON Lines trace (UTF-8)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NetworkConfigError(f"{path}: cannot read trace ({exc})") from exc
    found = False
    for line_number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_refuse_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise NetworkConfigError(f"{path}:{line_number}: not JSON ({exc.msg})") from None
        except (ValueError, RecursionError) as exc:  # duplicate keys, absurd nesting
            raise NetworkConfigError(f"{path}:{line_number}: {exc}") from None
        if not isinstance(row, dict):
            raise NetworkConfigError(f"{path}:{line_number}: not a JSON object")
        found = True
        yield line_number, row
    if not found:
        raise NetworkConfigError(f"{path}: the trace has no lines")


def load_trace(path: Path, num_clients: int) -> dict[int, tuple[tuple[int, LinkSpec], ...]]:
    """Read a JSON Lines trace; a client the trace never names keeps its device's link."""
    rows: dict[int, list[tuple[int, LinkSpec]]] = {}
    for line, row in _trace_lines(path):
        where = f"{path}:{line}"
        missing = [c for c in TRACE_COLUMNS if c not in row]
        if missing:
            raise NetworkConfigError(f"{where}: missing field(s) {', '.join(missing)}")
        values: dict[str, float] = {}
        for column in TRACE_COLUMNS:
            value = row[column]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise NetworkConfigError(f"{where}: field {column!r} is not a number: {value!r}")
            try:
                values[column] = float(value)
            except OverflowError:
                raise NetworkConfigError(f"{where}: field {column!r} is out of range") from None
        for column in ("client", "round"):  # nan, inf and 1.5 are floats, never ids
            if not isinstance(row[column], int) and not float(row[column]).is_integer():
                raise NetworkConfigError(
                    f"{where}: field {column!r} = {row[column]!r} is not an integer"
                )
        client, start = int(row["client"]), int(row["round"])
        if not 0 <= client < num_clients:
            raise NetworkConfigError(
                f"{where}: field 'client' = {row['client']!r} is not a client id in "
                f"0..{num_clients - 1}"
            )
        if start < 1:
            raise NetworkConfigError(f"{where}: field 'round' must be an integer >= 1")
        latency = _positive(where, "latency_ms", values["latency_ms"], allow_zero=True)
        up = _positive(where, "uplink_mbps", values["uplink_mbps"])
        down = _positive(where, "downlink_mbps", values["downlink_mbps"])
        earlier = rows.setdefault(client, [])
        if earlier and start <= earlier[-1][0]:
            raise NetworkConfigError(
                f"{where}: round {start} of client {client} is not after its previous row "
                f"(round {earlier[-1][0]}); a client's rows must go forward in time"
            )
        earlier.append((start, LinkSpec(latency / 1000.0, up * MBPS, down * MBPS)))
    return {client: tuple(changes) for client, changes in rows.items()}
