"""On a device: the stream runs in wall-clock time across ClientApp calls, the node config
names the device's rate, and replies carry wall-clock stamps when timing is measured."""

import time

import pytest
from flwr.app import Context, Message, MetricRecord, RecordDict

from client.mods import timing_stamps
from client.node import node_stream_rate
from client.stream_round import draw_stream_round
from client.streams import WallClock
from common.settings import Settings, default_run_config
from tests.helpers import reply_message
from wire.keys import METRICS_KEY, RECEIVED_AT, SENT_AT


class FakeTime:
    """A wall clock that only moves when told to, or when someone sleeps."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _settings(**overrides: object) -> Settings:
    config = default_run_config()
    config.update({"num-clients": 2, "stream-rates": "10, 20", **overrides})
    return Settings.from_run_config(config)


def test_wall_clock_keeps_its_epoch_in_the_node_state() -> None:
    state, time = RecordDict(), FakeTime(5000.0)
    first = WallClock.from_state(state, clock=time, sleep=time.sleep)
    time.now += 12.5
    later = WallClock.from_state(state, clock=time, sleep=time.sleep)  # a new ClientApp process
    assert first.epoch == later.epoch == 5000.0
    assert later.now_s() == 12.5


def test_samples_arrive_in_wall_clock_time_while_the_device_is_away() -> None:
    settings = _settings(**{"batch-policy": "rate", "buffer-policy": "truncation"})
    state, time = RecordDict(), FakeTime(100.0)

    def one_round(server_round: int):  # type: ignore[no-untyped-def]
        return draw_stream_round(
            state,
            settings,
            partition_id=0,
            partition_size=500,
            start_s=0.0,  # the server's virtual start: ignored on a device
            server_round=server_round,
            local_steps=1,
            batch_size=32,
            rate=25.0,  # the node config's, not the run's 10
            wall=WallClock.from_state(state, clock=time, sleep=time.sleep),
        )

    first = one_round(1)  # nothing has arrived yet: wait for batch-min (8) at 25/s
    assert first.rate == 25.0 and first.batches[0].size == 8
    assert time.slept == [pytest.approx(8 / 25)]
    time.now += 4.0  # training, upload, the next round's download: 4 s of wall clock
    second = one_round(2)
    assert second.batches[0].size == 100 and second.wait_s == 0.0  # 25/s x 4 s, no wait
    assert time.slept == [pytest.approx(8 / 25)]


def test_fixed_batches_sleep_until_the_samples_are_there() -> None:
    settings = _settings(**{"batch-policy": "fixed"})
    state, time = RecordDict(), FakeTime(0.0)
    drawn = draw_stream_round(
        state,
        settings,
        partition_id=1,
        partition_size=500,
        start_s=0.0,
        server_round=1,
        local_steps=2,
        batch_size=40,
        wall=WallClock.from_state(state, clock=time, sleep=time.sleep),
    )
    assert drawn.rate == 20.0  # the run's list, no node override
    assert [b.size for b in drawn.batches] == [40, 40]
    assert time.slept == [pytest.approx(2.0), pytest.approx(2.0)]  # 40 samples at 20/s, twice
    assert drawn.wait_s == pytest.approx(4.0)


def _context(node_config: dict[str, object]) -> Context:
    return Context(run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={})


def test_node_config_stream_rate() -> None:
    assert node_stream_rate(_context({"partition-id": 0})) is None
    assert node_stream_rate(_context({"stream-rate": 42})) == 42.0
    for bad, match in ((0.0, "must be > 0"), ("fast", "not a number"), (True, "not a number")):
        with pytest.raises(ValueError, match=match):
            node_stream_rate(_context({"stream-rate": bad}))


@pytest.mark.usefixtures("task_identity")
def test_replies_are_stamped_only_when_timing_is_measured() -> None:
    def reply() -> Message:
        return reply_message(RecordDict({METRICS_KEY: MetricRecord({"x": 1})}), src_node_id=1)

    def handler(msg: Message, context: Context) -> Message:
        return reply()

    def through_mod(settings: Settings) -> Message:
        context = Context(
            run_id=1,
            node_id=1,
            node_config={},
            state=RecordDict(),
            run_config=settings.to_run_config(),
        )
        return timing_stamps(reply(), context, handler)

    modelled = through_mod(_settings())
    assert set(modelled.content.metric_records[METRICS_KEY]) == {"x"}
    before = time.time()
    metrics = through_mod(_settings(timing="measured")).content.metric_records[METRICS_KEY]
    assert before <= metrics[RECEIVED_AT] <= metrics[SENT_AT] <= time.time()
