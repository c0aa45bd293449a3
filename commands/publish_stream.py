"""Replay a client's partition to an MQTT broker at its stream rate, as a sensor would.

    python -m commands.publish_stream --broker 127.0.0.1:1883 --partition-id 0 \\
        --run-config 'configs/scadles.toml num-clients=3' [--rate 5.0] [--count N | --duration S]

Sample by sample it publishes exactly what ``client.streams.ReplayStream`` says has arrived
by each moment (the same seeded order per pass over the partition that a simulated client
replays), in wall-clock time from one start time so that pacing does not drift, on topic
``<prefix>/node-<partition-id>/samples`` in the encoding of ``wire.stream_samples``, with
QoS 1 by default. It stops after ``--count`` samples, after ``--duration`` seconds, or on
SIGTERM / Ctrl-C (then it waits for the broker's acknowledgements and disconnects cleanly,
exit 0), and prints one line: ``published N samples to TOPIC in S s (R samples/s)``.
Exit 1 if some samples were never acknowledged.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from client.streams import ReplayStream
from commands.run_config import parse_overrides, resolve_settings
from common.data import ArrayData, client_partition
from common.rates import STREAM_OFF, client_rate
from common.settings import ConfigError, Settings
from wire.stream_samples import (
    ANONYMOUS,
    DEFAULT_TOPIC_PREFIX,
    BrokerAddress,
    BrokerAuth,
    StreamSample,
    encode_sample,
    parse_broker,
    sample_topic,
)

ClientFactory = Callable[[], mqtt.Client]  # a connected client whose network loop runs
CONNECT_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 10.0  # waiting for the broker to acknowledge what is in flight at the end
MAX_WAIT_S = 0.5  # longest sleep between checks for a stop


@dataclass(frozen=True)
class PublishResult:
    published: int  # acknowledged by the broker (QoS > 0) or written to it (QoS 0)
    unconfirmed: int  # sent but never acknowledged
    topic: str
    elapsed_s: float  # from the start of the schedule to its last read (the stop)

    @property
    def rate(self) -> float:
        return self.published / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def line(self) -> str:
        return (
            f"published {self.published} samples to {self.topic} in {self.elapsed_s:.2f} s "
            f"({self.rate:.2f} samples/s)"
        )


def connect_client(
    address: BrokerAddress,
    *,
    client_id: str = "",
    auth: BrokerAuth = ANONYMOUS,
    timeout_s: float = CONNECT_TIMEOUT_S,
) -> mqtt.Client:
    """A paho client connected to ``address`` with its network loop running (it reconnects
    by itself); RuntimeError naming the broker's answer if it refuses or does not answer."""
    client = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
    auth.apply(client)
    answered = threading.Event()
    reason: list[Any] = []

    def on_connect(c: mqtt.Client, userdata: Any, flags: Any, code: Any, props: Any) -> None:
        reason.append(code)
        answered.set()

    client.on_connect = on_connect
    try:
        client.connect(address.host, address.port)
    except OSError as exc:
        raise RuntimeError(f"cannot reach the MQTT broker at {address}: {exc}") from None
    client.loop_start()
    if not answered.wait(timeout_s) or reason[0].is_failure:
        client.loop_stop()
        client.disconnect()
        answer = f"refused: {reason[0]}" if reason else f"no answer in {timeout_s:.0f} s"
        raise RuntimeError(f"MQTT broker at {address} {answer}")
    return client


class _Acks:
    """How many messages the broker has acknowledged (QoS > 0) or paho has written (QoS 0):
    paho's ``on_publish``, so a message first refused for want of a connection and sent
    after paho reconnected counts too (its MQTTMessageInfo keeps the first error)."""

    def __init__(self) -> None:
        self.count = 0
        self._changed = threading.Condition()

    def on_publish(
        self, client: mqtt.Client, userdata: Any, mid: int, code: Any, props: Any
    ) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_s: float) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self.count >= count, timeout_s)
            return self.count


def publish(
    broker: BrokerAddress | ClientFactory,
    data: ArrayData,
    *,
    topic: str,
    rate: float,
    seed: int | tuple[int, ...],
    count: int | None = None,
    duration_s: float | None = None,
    qos: int = 1,
    stop: threading.Event | None = None,
    client_id: str = "",
) -> PublishResult:
    """Publish ``data``'s samples as ``ReplayStream(len(data), rate, seed)`` has them arrive,
    from now in wall-clock time, until ``count`` samples, ``duration_s`` seconds or ``stop``.

    ``broker``: an address (we connect with ``client_id``) or a factory of a connected client
    (its ``on_publish`` is ours); either way the client is disconnected at the end.
    """
    if count is not None and count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if duration_s is not None and duration_s < 0:
        raise ValueError(f"duration must be >= 0 s, got {duration_s}")
    stream = ReplayStream(len(data), rate, seed)
    stop = stop or threading.Event()
    client = (
        connect_client(broker, client_id=client_id)
        if isinstance(broker, BrokerAddress)
        else broker()
    )
    acks = _Acks()
    client.on_publish = acks.on_publish
    sent = 0
    start = time.monotonic()
    try:
        while count is None or sent < count:
            now = time.monotonic() - start
            if duration_s is not None:
                now = min(now, duration_s)
            for i in stream.read_until(now)[: None if count is None else count - sent]:
                sample = StreamSample(sent, time.time(), data.x[i], int(data.y[i]))
                client.publish(topic, encode_sample(sample), qos=qos)
                sent += 1
            if stop.is_set() or now == duration_s or sent == count:
                break
            # From one start time: the next arrival's time on the schedule, not "now + 1/rate".
            wait = stream.clock_s + stream.time_until(1) - (time.monotonic() - start)
            if duration_s is not None:
                wait = min(wait, duration_s - (time.monotonic() - start))
            stop.wait(min(max(wait, 0.0), MAX_WAIT_S))
        confirmed = acks.wait_for(sent, ACK_TIMEOUT_S)
    finally:
        client.disconnect()
        client.loop_stop()
    return PublishResult(confirmed, sent - confirmed, topic, stream.clock_s)


def partition_rate(settings: Settings, partition_id: int, rate: float | None = None) -> float:
    """``rate`` if given, else the run's rate for the partition (as the simulation draws it)."""
    if rate is not None:
        return rate
    if settings.streams.stream_rates == STREAM_OFF:
        raise ConfigError("stream-rates is 'off' in the run config: give --rate")
    return client_rate(
        settings.streams.stream_rates, partition_id, settings.run.num_clients, settings.run.seed, 0
    )


def publish_partition(
    broker: BrokerAddress | ClientFactory,
    settings: Settings,
    partition_id: int,
    *,
    rate: float | None = None,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    count: int | None = None,
    duration_s: float | None = None,
    qos: int = 1,
    stop: threading.Event | None = None,
    client_id: str = "",
) -> PublishResult:
    """Replay client ``partition_id``'s partition in the order its simulated stream has."""
    rate = partition_rate(settings, partition_id, rate)
    return publish(
        broker,
        client_partition(settings, partition_id),
        topic=sample_topic(topic_prefix, partition_id),
        rate=rate,
        seed=(settings.run.seed, partition_id),  # what client.stream_round gives ReplayStream
        count=count,
        duration_s=duration_s,
        qos=qos,
        stop=stop,
        client_id=client_id or f"edgeflex-replay-{partition_id}-{os.getpid()}",
    )


def publisher_command(
    broker: BrokerAddress,
    partition_id: int,
    run_config: str,
    *,
    rate: float | None = None,
    count: int | None = None,
    duration_s: float | None = None,
    topic_prefix: str = DEFAULT_TOPIC_PREFIX,
    qos: int = 1,
    tls_ca: Path | None = None,
) -> list[str]:
    """The command line that runs this publisher as a process of its own (for launchers)."""
    optional = {"--rate": rate, "--count": count, "--duration": duration_s, "--tls-ca": tls_ca}
    return [
        sys.executable,
        "-m",
        "commands.publish_stream",
        "--broker",
        str(broker),
        "--partition-id",
        str(partition_id),
        "--run-config",
        run_config,
        "--topic-prefix",
        topic_prefix,
        "--qos",
        str(qos),
        *[
            part
            for flag, value in optional.items()
            if value is not None
            for part in (flag, str(value))
        ],
    ]


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number > 0")
    return value


def _broker(text: str) -> BrokerAddress:
    try:
        return parse_broker(text)
    except ValueError as exc:  # argparse shows an ArgumentTypeError's own message
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--broker", required=True, type=_broker, help="host:port")
    parser.add_argument("--partition-id", required=True, type=int)
    parser.add_argument("--run-config", default="", help="'key=value ...' or a TOML file")
    parser.add_argument("--rate", type=_positive, help="samples/s (default: the run's rate)")
    until = parser.add_mutually_exclusive_group()
    until.add_argument("--count", type=_count, help="stop after this many samples")
    until.add_argument("--duration", type=_positive, help="stop after this many seconds")
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    parser.add_argument("--qos", type=int, choices=(0, 1, 2), default=1)
    parser.add_argument("--tls-ca", type=Path, help="CA certificate: MQTT over TLS")
    parser.add_argument("--username", help="for a broker with a password file")
    parser.add_argument("--password-file", type=Path, help="first line: the password")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        settings = resolve_settings(parse_overrides(args.run_config))
        if not 0 <= args.partition_id < settings.run.num_clients:
            raise ConfigError(
                f"partition-id {args.partition_id} is outside 0..{settings.run.num_clients - 1} "
                f"(num-clients = {settings.run.num_clients})"
            )
        rate = partition_rate(settings, args.partition_id, args.rate)
        auth = BrokerAuth.of(args.tls_ca, args.username, args.password_file)
    except (ConfigError, ValueError, OSError, IndexError) as exc:
        print(f"edgeflex: bad configuration: {exc}", file=sys.stderr)
        return 2
    client_id = f"edgeflex-replay-{args.partition_id}-{os.getpid()}"
    try:
        result = publish_partition(
            lambda: connect_client(args.broker, client_id=client_id, auth=auth),
            settings,
            args.partition_id,
            rate=rate,
            topic_prefix=args.topic_prefix,
            count=args.count,
            duration_s=args.duration,
            qos=args.qos,
            stop=stop,
        )
    except (RuntimeError, ValueError) as exc:
        print(f"edgeflex: {exc}", file=sys.stderr)
        return 1
    print(result.line(), flush=True)
    if result.unconfirmed:
        print(f"edgeflex: {result.unconfirmed} samples never acknowledged", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
