"""Stream samples over MQTT: one sample per message, as a small JSON object.

    {"seq": 41, "t": 1767225600.125, "x": [0.0, 0.3125, ...], "y": 7}

``seq`` is the publisher's running count from 0 (a receiver that sees gaps or repeats knows
how many were published: QoS 1 delivers at least once), ``t`` the Unix time of publishing,
``x`` the features (finite numbers) and ``y`` the label. JSON, not raw float32, so that a
sensor can publish from any language or from ``mosquitto_pub``. A device decodes what arrives
from a network it does not control: ``decode_sample`` checks everything and raises only
``SampleError``, naming the field, for any bytes at all.

Imports only the standard library, numpy and ``wire.fields`` (itself the standard library only).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from wire.fields import is_integer, is_number

SEQ, SENT_AT, FEATURES, LABEL = "seq", "t", "x", "y"
SAMPLE_KEYS = (SEQ, SENT_AT, FEATURES, LABEL)
DEFAULT_TOPIC_PREFIX = "edgeflex"
MAX_SAMPLE_BYTES = 1 << 20  # a 3x64x64 image at 25 characters a number still fits
MAX_SEQ = 2**63 - 1  # fits an int64 counter
_SHOWN = 40  # characters of a bad key or value quoted in an error


@dataclass(frozen=True)
class StreamSample:
    seq: int
    sent_at: float  # Unix seconds when published
    x: NDArray[np.float32]
    y: int


class SampleError(ValueError):
    """A stream sample's payload is malformed: size, encoding, keys, types or values."""


def sample_topic(prefix: str, partition_id: int) -> str:
    """The topic partition ``partition_id``'s samples travel on."""
    if not prefix or any(c in prefix for c in "+#\0"):
        raise ValueError(f"topic prefix {prefix!r} must be non-empty without +, # or NUL")
    if partition_id < 0:
        raise ValueError(f"partition id {partition_id} must be >= 0")
    return f"{prefix}/node-{partition_id}/samples"


def encode_sample(sample: StreamSample) -> bytes:
    """The message payload: compact UTF-8 JSON; float32 features written exactly."""
    x = np.asarray(sample.x, dtype=np.float32)
    if x.ndim != 1:
        raise SampleError(f"sample field {FEATURES!r} must be one-dimensional, got {x.shape}")
    body = {
        SEQ: int(sample.seq),
        SENT_AT: float(sample.sent_at),
        FEATURES: [float(v) for v in x],  # float64 text of a float32: parses back exactly
        LABEL: int(sample.y),
    }
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except ValueError:
        raise SampleError("a sample's 't' and 'x' must be finite numbers") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _no_constants(name: str) -> Any:
    raise SampleError(f"sample payload contains {name}, which is not a finite number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    body = dict(pairs)
    if len(body) != len(pairs):
        counts = Counter(key for key, _ in pairs)
        repeated = sorted(key for key, n in counts.items() if n > 1)
        raise SampleError(f"sample payload repeats key(s) {', '.join(map(_shown, repeated[:5]))}")
    return body


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a number, infinite, or too large)."""
    if not is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _parse(payload: bytes, max_bytes: int) -> dict[str, Any]:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise SampleError(f"sample payload must be bytes, got {type(payload).__name__}")
    if len(payload) > max_bytes:
        raise SampleError(f"sample payload is {len(payload)} bytes, over the {max_bytes} limit")
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SampleError(
            f"sample payload is not UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None
    try:
        body = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_unique_keys)
    except SampleError:
        raise
    except RecursionError:
        raise SampleError("sample payload nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and ints over Python's digit limit
        raise SampleError(f"sample payload is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise SampleError(f"sample payload must be a JSON object, got {type(body).__name__}")
    missing = [key for key in SAMPLE_KEYS if key not in body]
    unknown = sorted(key for key in body if key not in SAMPLE_KEYS)
    if missing or unknown:
        parts = [f"missing key(s) {', '.join(map(repr, missing))}"] if missing else []
        if unknown:
            parts.append(f"unknown key(s) {', '.join(map(_shown, unknown[:5]))}")
        raise SampleError(f"sample payload: {'; '.join(parts)}; expected exactly {SAMPLE_KEYS}")
    return body


def _features(value: Any, features: int) -> NDArray[np.float32]:
    if not isinstance(value, list):
        raise SampleError(f"sample field {FEATURES!r} must be a list, got {_shown(value)}")
    if len(value) != features:
        raise SampleError(
            f"sample field {FEATURES!r} has {len(value)} values, expected {features} features"
        )
    numbers = [_finite(v) for v in value]
    for i, number in enumerate(numbers):
        if number is None:
            raise SampleError(
                f"sample field {FEATURES!r}[{i}] = {_shown(value[i])} is not a finite number"
            )
    with np.errstate(over="ignore"):
        x = np.asarray(numbers, dtype=np.float32)
    if not np.isfinite(x).all():
        i = int(np.flatnonzero(~np.isfinite(x))[0])
        raise SampleError(
            f"sample field {FEATURES!r}[{i}] = {_shown(value[i])} is outside float32 range"
        )
    return x


def decode_sample(
    payload: bytes, *, features: int, classes: int, max_bytes: int = MAX_SAMPLE_BYTES
) -> StreamSample:
    """Check a message payload and return its sample.

    Raises
    ------
    SampleError
        For every payload that is not a valid sample, naming what is wrong; never another
        exception, whatever the bytes.
    """
    body = _parse(payload, max_bytes)
    seq = body[SEQ]
    if not is_integer(seq) or not 0 <= seq <= MAX_SEQ:
        raise SampleError(f"sample field {SEQ!r} = {_shown(seq)} is not an integer in 0..2**63-1")
    sent_at = _finite(body[SENT_AT])
    if sent_at is None:
        raise SampleError(
            f"sample field {SENT_AT!r} = {_shown(body[SENT_AT])} is not a finite number"
        )
    x = _features(body[FEATURES], features)
    y = body[LABEL]
    if not is_integer(y) or not 0 <= y < classes:
        raise SampleError(
            f"sample field {LABEL!r} = {_shown(y)} is not an integer label in 0..{classes - 1}"
        )
    return StreamSample(seq=seq, sent_at=sent_at, x=x, y=y)


@dataclass(frozen=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerAuth:
    """How a client proves itself to the broker and checks the broker: TLS with a CA
    certificate, a username and password (the broker's password file), or neither (a loopback
    broker that allows anonymous clients)."""

    tls_ca: Path | None = None
    username: str | None = None
    password: str | None = None

    def apply(self, client: Any) -> None:
        """Set these on a paho ``mqtt.Client`` before it connects."""
        if self.tls_ca is not None:
            client.tls_set(ca_certs=str(self.tls_ca))
        if self.username is not None:
            client.username_pw_set(self.username, self.password)

    @classmethod
    def of(
        cls, tls_ca: Path | None, username: str | None, password_file: Path | None
    ) -> BrokerAuth:
        """From command-line options: the password is the first line of ``password_file``."""
        password = None
        if password_file is not None:
            lines = password_file.read_text().splitlines()
            if not lines:
                raise ValueError(f"{password_file}: empty (its first line is the password)")
            password = lines[0]
        if password is not None and username is None:
            raise ValueError("a password file needs a username")
        return cls(tls_ca, username, password)


ANONYMOUS = BrokerAuth()  # a loopback broker that allows anonymous clients


def parse_broker(text: str) -> BrokerAddress:
    """``"host:port"`` (a command-line argument) -> BrokerAddress; ValueError says what is off."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"broker {text!r} is not host:port (e.g. 127.0.0.1:1883)")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:1883
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"broker {text!r}: port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"broker {text!r}: port {port} is outside 1..65535")
    return BrokerAddress(host, port)
