import json
from pathlib import Path

import pytest

from common.settings import PROJECT_ROOT
from tests.helpers import trace_line, unit_clock
from timing.devices import MBPS, DeviceProfile
from timing.network import NetworkConfigError, load_schedule, load_trace
from wire.tally import ClientWork

PRESETS = PROJECT_ROOT / "configs" / "networks.toml"
DEVICE = DeviceProfile("pi", 100.0, 0.0, 5 * MBPS, 25 * MBPS, 0.05)


def test_c1_edge_segments_by_round() -> None:
    schedule = load_schedule(PRESETS, "c1-edge", num_clients=2, seed=0)
    expected = {1: (0.001, 25), 36: (0.001, 25), 37: (0.001, 1), 73: (0.05, 1), 109: (0.05, 25)}
    for server_round, (latency, mbps) in expected.items():
        link = schedule.profiles(server_round, {0: DEVICE})[0]
        assert link.latency_s == pytest.approx(latency)
        assert link.uplink_bytes_per_s == link.downlink_bytes_per_s == pytest.approx(mbps * MBPS)
        assert link.train_flops_per_s == DEVICE.train_flops_per_s


def test_static_keeps_the_device_link_and_every_preset_loads() -> None:
    assert load_schedule(PRESETS, "static", 3, 0).profiles(5, {0: DEVICE})[0] == DEVICE
    for name in ("c1", "c1-edge", "c1-edge-jitter", "c2", "c2-edge", "trace-example"):
        load_schedule(PRESETS, name, 3, 0)


def test_jitter_is_bounded_seeded_and_varies() -> None:
    a = load_schedule(PRESETS, "c1-edge-jitter", 2, seed=1)
    b = load_schedule(PRESETS, "c1-edge-jitter", 2, seed=1)
    latencies = [a.profiles(r, {0: DEVICE})[0].latency_s for r in range(1, 30)]
    assert latencies == [b.profiles(r, {0: DEVICE})[0].latency_s for r in range(1, 30)]
    assert all(0.0008 <= x <= 0.0012 for x in latencies) and len(set(latencies)) > 20


def test_clock_uses_the_rounds_link() -> None:
    clock = unit_clock({0: DEVICE}, load_schedule(PRESETS, "c1-edge", 1, 0))
    work = ClientWork(client=0, bytes_down=125_000, samples=0, bytes_up=0)
    clock.begin_round(1)
    fast = clock.client_timing(work).total_s  # 1 ms + 125 kB at 25 Mbit/s = 0.041 s
    clock.begin_round(40)
    slow = clock.client_timing(work).total_s  # 1 ms + 125 kB at 1 Mbit/s = 1.001 s
    assert fast == pytest.approx(0.041) and slow == pytest.approx(1.001)


def test_trace_rows_hold_from_their_round() -> None:
    schedule = load_schedule(PRESETS, "trace-example", 3, 0)
    assert schedule.link(19, 1).latency_s == pytest.approx(0.050)  # type: ignore[union-attr]
    assert schedule.link(20, 1).uplink_bytes_per_s == pytest.approx(1 * MBPS)  # type: ignore[union-attr]
    assert load_schedule(PRESETS, "trace-example", 4, 0).link(5, 3) is None  # not in the trace


GOOD = trace_line(1, 0, 10, 5, 20)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            json.dumps({"round": 1, "client": 0, "latency_ms": 10, "downlink_mbps": 20}),
            r"trace.jsonl:1: missing field\(s\) uplink_mbps",
        ),
        (GOOD + trace_line(3, 1, 10, -5, 20), r"trace.jsonl:2: field 'uplink_mbps' must be > 0"),
        (
            GOOD + trace_line(3, 7, 10, 5, 20),
            r"trace.jsonl:2: field 'client' = 7 is not a client id in 0..1",
        ),
        (
            GOOD + trace_line(3, 1, "fast", 5, 20),
            r"trace.jsonl:2: field 'latency_ms' is not a number: 'fast'",
        ),
        (
            GOOD + trace_line(0, 1, 10, 5, 20),
            r"trace.jsonl:2: field 'round' must be an integer >= 1",
        ),
        (GOOD + "\n" + trace_line(3, True, 10, 5, 20), r"trace.jsonl:3: field 'client' is not a"),
        (GOOD + "[3, 1, 10, 5, 20]\n", r"trace.jsonl:2: not a JSON object"),
        (GOOD + "3,1,10,5,20\n", r"trace.jsonl:2: not JSON"),  # a CSV row
        (
            GOOD + trace_line(3, 1, 10, 5, 20)[:-2] + ', "client": 0}\n',
            r":2: .*given twice: client",
        ),
        (GOOD + trace_line(2.5, 1, 10, 5, 20), r"trace.jsonl:2: field 'round' = 2.5 is not an"),
        (GOOD + trace_line(3, 1, int("1" + "0" * 400), 5, 20), r":2: field 'latency_ms' is out"),
        ("[" * 100_000 + "]" * 100_000 + "\n", r"trace.jsonl:1: maximum recursion depth"),
        ("\n \n", r"trace.jsonl: the trace has no lines"),
    ],
)
def test_malformed_trace_names_file_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    with pytest.raises(NetworkConfigError, match=message):
        load_trace(path, num_clients=2)


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        (
            'kind = "segments"\nsegments = [[1, 1.0, -3.0]]',
            r"presets.toml:1: network 'bad': field 'segments\[0\] bandwidth-mbps' must be > 0",
        ),
        ('kind = "segments"\nsegment = [[1, 1.0, 3.0]]', r"unknown field 'segment'"),
        ('kind = "wifi"', r"field 'kind' must be one of static, segments, trace"),
        ('kind = "static"\njitter = 1.5', r"field 'jitter' must be < 1"),
        ('kind = "trace"', r"field 'file' \(the trace, JSON Lines\) is required"),
    ],
)
def test_malformed_preset_names_file_line_and_field(
    tmp_path: Path, preset: str, message: str
) -> None:
    path = tmp_path / "presets.toml"
    path.write_text(f"[network.bad]\n{preset}\n")
    with pytest.raises(NetworkConfigError, match=message):
        load_schedule(path, "bad", 2, 0)
    with pytest.raises(NetworkConfigError, match="network = 'other' is not defined"):
        load_schedule(path, "other", 2, 0)
