"""The replay publisher and the local broker, against a real mosquitto (the ``mqtt_broker``
fixture: skipped without mosquitto, failed in CI)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import psutil
import pytest

from client.streams import ReplayStream
from commands.broker import CONFIG_NAME, accepts, local_broker
from commands.processes import process_tree
from commands.publish_stream import PublishResult, publish, publish_partition, publisher_command
from common.data import DIGITS_SPEC, ArrayData, client_partition
from common.settings import settings_with
from wire.stream_samples import (
    BrokerAddress,
    StreamSample,
    decode_sample,
    parse_broker,
    sample_topic,
)

WAIT_S = 10.0
RUN_CONFIG = "num-clients=3 stream-rates=S1-normal"


class Subscriber:
    """A QoS 1 subscriber that decodes what arrives (what a device's agent does)."""

    def __init__(
        self,
        broker: BrokerAddress,
        topic: str,
        *,
        client_id: str = "",
        persistent: bool = False,
        subscribe: bool = True,
    ) -> None:
        self.samples: list[StreamSample] = []
        self.session_present: bool | None = None
        self._changed = threading.Condition()
        self._ready = threading.Event()
        self._topic, self._subscribe = topic, subscribe
        self.client = mqtt.Client(
            callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=not persistent,
        )
        self.client.on_connect = self._on_connect
        self.client.on_subscribe = lambda *args: self._ready.set()
        self.client.on_message = self._on_message
        self.client.connect(broker.host, broker.port)
        self.client.loop_start()
        assert self._ready.wait(WAIT_S), "no CONNACK/SUBACK from the broker"

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, *rest: Any) -> None:
        self.session_present = bool(flags.session_present)
        if self._subscribe:
            client.subscribe(self._topic, qos=1)
        else:
            self._ready.set()

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        sample = decode_sample(
            message.payload,
            features=DIGITS_SPEC.num_features,
            classes=DIGITS_SPEC.num_classes,
        )
        with self._changed:
            self.samples.append(sample)
            self._changed.notify_all()

    def seqs(self) -> list[int]:
        with self._changed:
            return [s.seq for s in self.samples]

    def wait_for(self, seqs: set[int], timeout_s: float = WAIT_S) -> None:
        with self._changed:
            self._changed.wait_for(lambda: seqs <= {s.seq for s in self.samples}, timeout_s)
        assert seqs <= set(self.seqs()), f"missing {sorted(seqs - set(self.seqs()))[:10]}"

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _expected_ids(size: int, rate: float, seed: tuple[int, ...], count: int) -> np.ndarray:
    """What ReplayStream says arrives first: the order a simulated client replays."""
    stream = ReplayStream(size, rate, seed)
    return stream.read_until(stream.time_until(count))[:count]


def test_publishes_every_sample_once_in_the_stream_order_at_the_rate(
    mqtt_broker: BrokerAddress,
) -> None:
    settings = settings_with(num_clients=3, stream_rates="S1-normal")
    data, topic, rate, count = client_partition(settings, 1), sample_topic("edgeflex", 1), 200.0, 50
    sub = Subscriber(mqtt_broker, topic)
    try:
        result = publish_partition(mqtt_broker, settings, 1, rate=rate, count=count)
        sub.wait_for(set(range(count)))
    finally:
        sub.close()
    assert result == PublishResult(count, 0, topic, result.elapsed_s)
    assert sorted(sub.seqs()) == list(range(count))  # every one, exactly once
    ids = _expected_ids(len(data), rate, (settings.run.seed, 1), count)
    by_seq = {s.seq: s for s in sub.samples}
    assert np.array_equal(np.stack([by_seq[k].x for k in range(count)]), data.x[ids])
    assert [by_seq[k].y for k in range(count)] == data.y[ids].tolist()
    # Paced from one start time: sample j leaves at (j + 1) / rate, not all at once (loose
    # bounds: a loaded machine delays a publish, and the schedule then catches up).
    spread, expected = by_seq[count - 1].sent_at - by_seq[0].sent_at, (count - 1) / rate
    assert 0.6 * expected < spread < expected + 0.4, spread
    assert count / rate - 1e-6 <= result.elapsed_s < count / rate + 0.4, result.elapsed_s
    assert result.line().startswith(f"published {count} samples to {topic} in ")


def test_passes_over_a_small_partition_reshuffle_as_the_replay_does(
    mqtt_broker: BrokerAddress,
) -> None:
    rng = np.random.default_rng(0)
    data = ArrayData(
        x=rng.random((7, DIGITS_SPEC.num_features), dtype=np.float32),
        y=np.arange(7, dtype=np.int64),
    )
    topic, seed = "edgeflex-test/passes/samples", (5, 2)
    sub = Subscriber(mqtt_broker, topic)
    try:
        result = publish(mqtt_broker, data, topic=topic, rate=500.0, seed=seed, count=20)
        sub.wait_for(set(range(20)))
    finally:
        sub.close()
    assert result.published == 20
    by_seq = {s.seq: s.y for s in sub.samples}
    assert [by_seq[k] for k in range(20)] == _expected_ids(7, 500.0, seed, 20).tolist()


def test_a_persistent_session_gets_what_was_published_while_it_was_away(
    mqtt_broker: BrokerAddress,
) -> None:
    """A device's agent restarting: QoS 1, a fixed client id, clean session off. The broker
    queues what arrives meanwhile and hands it over on reconnect, without a new SUBSCRIBE."""
    topic, client_id = "edgeflex-test/persistent/samples", "edgeflex-test-persistent"
    data = ArrayData(x=np.zeros((30, DIGITS_SPEC.num_features), np.float32), y=np.zeros(30, int))
    watcher = Subscriber(mqtt_broker, topic)  # sees everything live: tells us when to go on
    agent = Subscriber(mqtt_broker, topic, client_id=client_id, persistent=True)
    stop = threading.Event()
    results: list[PublishResult] = []
    publisher = threading.Thread(
        target=lambda: results.append(
            publish(mqtt_broker, data, topic=topic, rate=100.0, seed=1, stop=stop)
        )
    )
    publisher.start()
    try:
        agent.wait_for(set(range(10)))
        agent.close()  # the agent stops
        before = set(agent.seqs())
        watcher.wait_for(set(range(max(before) + 21)))  # 20 more published while it is away
        stop.set()
        publisher.join(WAIT_S)
        published = results[0].published
        assert results[0].unconfirmed == 0 and published >= max(before) + 21
        back = Subscriber(mqtt_broker, topic, client_id=client_id, persistent=True, subscribe=False)
        try:
            assert back.session_present
            back.wait_for(set(range(published)) - before)
        finally:
            back.close()
    finally:
        stop.set()
        publisher.join(WAIT_S)
        watcher.close()
    after = back.seqs()
    assert before | set(after) == set(range(published))  # nothing lost
    assert len(after) - len(set(after)) == 0  # the queue hands each over once
    assert len(set(after) - before) >= 20


def test_the_command_line_stops_cleanly_on_sigterm(mqtt_broker: BrokerAddress) -> None:
    topic = sample_topic("edgeflex-cli", 0)
    sub = Subscriber(mqtt_broker, topic)
    cmd = publisher_command(mqtt_broker, 0, RUN_CONFIG, rate=100.0, topic_prefix="edgeflex-cli")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sub.wait_for({0, 1, 2}, timeout_s=60.0)  # the command imports torch and Flower first
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sub.close()
    assert proc.returncode == 0, err
    n = int(out.split()[1])
    assert out.startswith(f"published {n} samples to {topic} in ") and "samples/s)" in out
    sub.wait_for(set(range(n)))
    assert sorted(sub.seqs()) == list(range(n))


def test_the_broker_is_ours_on_loopback_and_gone_after_the_context(
    tmp_path: Path, mqtt_broker: BrokerAddress
) -> None:
    """(``mqtt_broker`` only for its skip or fail without mosquitto; this starts another.)"""
    with local_broker(tmp_path) as address:
        config = str(tmp_path / CONFIG_NAME)
        ours = [
            pid
            for pid in process_tree(os.getpid())
            if config in " ".join(psutil.Process(pid).cmdline())
        ]
        assert len(ours) == 1 and address.host == "127.0.0.1" and accepts(address)
        assert "max_queued_messages 0" in (tmp_path / CONFIG_NAME).read_text()
    assert not psutil.pid_exists(ours[0])
    assert not accepts(address)
    assert "mosquitto version" in (tmp_path / "mosquitto.log").read_text()


def test_parse_broker() -> None:
    assert parse_broker("127.0.0.1:1883") == BrokerAddress("127.0.0.1", 1883)
    assert parse_broker("[::1]:8883") == BrokerAddress("::1", 8883)
    assert str(BrokerAddress("edge.local", 1883)) == "edge.local:1883"
    for bad, words in [
        ("localhost", "host:port"),
        (":1883", "host:port"),
        ("h:x", "not a number"),
        ("h:0", "1..65535"),
        ("h:70000", "1..65535"),
    ]:
        with pytest.raises(ValueError, match=words):
            parse_broker(bad)


def test_streams_off_needs_a_rate() -> None:
    from commands.publish_stream import partition_rate
    from common.settings import ConfigError

    settings = settings_with(num_clients=3)
    with pytest.raises(ConfigError, match="--rate"):
        partition_rate(settings, 0)
    assert partition_rate(settings, 0, 5.0) == 5.0
    on = settings_with(num_clients=3, stream_rates="4, 5, 6")
    assert partition_rate(on, 2) == 6.0
