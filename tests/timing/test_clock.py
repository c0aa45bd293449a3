import math

import pytest

from tests.helpers import unit_clock
from timing.clock import ServerLink, VirtualClock, transfer_s
from timing.devices import DeviceProfile
from wire.tally import ClientWork

SLOW = DeviceProfile(
    "slow",
    train_flops_per_s=100.0,
    step_overhead_s=0.0,
    uplink_bytes_per_s=500_000.0,
    downlink_bytes_per_s=1_000_000.0,
    latency_s=0.01,
)
FAST = DeviceProfile(
    "fast",
    train_flops_per_s=1000.0,
    step_overhead_s=0.0,
    uplink_bytes_per_s=10_000_000.0,
    downlink_bytes_per_s=10_000_000.0,
    latency_s=0.001,
)


def test_one_client_by_hand() -> None:
    clock = unit_clock({0: SLOW})
    t = clock.client_timing(
        ClientWork(client=0, bytes_down=2_000_000, samples=50, bytes_up=1_000_000)
    )
    # download 0.01 + 2 s, compute 50/100 = 0.5 s, upload 0.01 + 2 s
    assert t.download_s == pytest.approx(2.01)
    assert t.compute_s == pytest.approx(0.5)
    assert t.upload_s == pytest.approx(2.01)
    assert t.total_s == pytest.approx(4.52)


def test_round_waits_for_the_slowest_client_and_time_accumulates() -> None:
    clock = unit_clock({0: SLOW, 1: FAST})
    works = [ClientWork(0, 1_000_000, 10, 500_000), ClientWork(1, 1_000_000, 10, 500_000)]
    phase = clock.phase("train", works)
    # slow: 0.01 + 1 + 0.1 + 0.01 + 1 = 2.12; fast: 0.001 + 0.1 + 0.01 + 0.001 + 0.05 = 0.162
    assert phase.clients[1].total_s == pytest.approx(0.162)
    assert phase.duration_s == pytest.approx(2.12)
    assert clock.advance([phase]) == pytest.approx(2.12)
    assert clock.advance(
        [phase, clock.phase("values", [ClientWork(1, 0, 0, 10_000)])]
    ) == pytest.approx(2.12 + 0.002)
    assert clock.now_s == pytest.approx(4.242)


def test_zero_bytes_cost_nothing_and_negative_bytes_are_refused() -> None:
    assert transfer_s(0, 1.0, 5.0) == 0.0
    with pytest.raises(ValueError):
        transfer_s(-1, 1.0, 0.0)


def test_unknown_client_and_bad_profile_are_refused() -> None:
    with pytest.raises(KeyError, match="no device profile for client 3"):
        unit_clock({0: SLOW}).client_timing(ClientWork(3, 1, 1, 1))
    with pytest.raises(ValueError, match="uplink bandwidth must be > 0"):
        DeviceProfile("bad", 1.0, 0.0, 0.0, 1.0, 0.0)


def test_compute_is_steps_times_overhead_plus_flops_over_throughput() -> None:
    pi = DeviceProfile("pi", 2e9, 0.005, 1e6, 1e6, 0.0)
    clock = VirtualClock({0: pi}, flops_per_sample=3e6)
    work = ClientWork(0, 0, samples=64, bytes_up=0, steps=2)
    # 2 steps x 5 ms + 64 samples x 3 MFLOP / 2 GFLOP/s = 0.01 + 0.096
    assert clock.client_timing(work).compute_s == pytest.approx(0.106)
    with pytest.raises(ValueError, match="training FLOPs per sample must be > 0"):
        VirtualClock({0: pi}, flops_per_sample=0.0)
    with pytest.raises(ValueError, match="samples and steps must be >= 0"):
        clock.client_timing(ClientWork(0, 0, samples=1, bytes_up=0, steps=-1))


def test_a_phase_shares_the_servers_link() -> None:
    """Four clients download 1 MB each through a 2 MB/s server uplink: 2 s for all of it, so
    each download takes that (its own 10 MB/s link would take 0.1 s), plus both latencies."""
    server = ServerLink(uplink_bytes_per_s=2e6, downlink_bytes_per_s=1e6, latency_s=0.02)
    clock = VirtualClock({i: FAST for i in range(4)}, flops_per_sample=1.0, server=server)
    works = [ClientWork(i, 1_000_000, 0, 250_000) for i in range(4)]
    phase = clock.phase("train", works)
    for timing in phase.clients.values():
        assert timing.download_s == pytest.approx(0.001 + 0.02 + 4e6 / 2e6)
        assert timing.upload_s == pytest.approx(0.001 + 0.02 + 1e6 / 1e6)
    # one client alone is not held by the server: its own link is the slower stretch
    alone = clock.phase("train", works[:1]).clients[0]
    assert alone.download_s == pytest.approx(0.001 + 0.02 + max(1e6 / 10e6, 1e6 / 2e6))
    # unlimited (the default) charges what the clients' own links do, bit for bit
    unlimited = unit_clock({i: FAST for i in range(4)}).phase("train", works)
    assert unlimited.clients[0].download_s == 0.001 + 1_000_000 / 10_000_000.0


def test_server_link_from_the_run_config() -> None:
    link = ServerLink.from_mbps(8.0, 0.0, 5.0)
    assert link.uplink_bytes_per_s == 1e6 and link.downlink_bytes_per_s == math.inf
    assert link.latency_s == pytest.approx(0.005)
    with pytest.raises(ValueError, match="the server's uplink must be > 0"):
        ServerLink(uplink_bytes_per_s=0.0)
