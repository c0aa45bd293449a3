import pytest

from timing.clock import VirtualClock, transfer_s
from timing.devices import DeviceProfile
from wire.tally import ClientWork

SLOW = DeviceProfile(
    "slow",
    compute_samples_per_s=100.0,
    uplink_bytes_per_s=500_000.0,
    downlink_bytes_per_s=1_000_000.0,
    latency_s=0.01,
)
FAST = DeviceProfile(
    "fast",
    compute_samples_per_s=1000.0,
    uplink_bytes_per_s=10_000_000.0,
    downlink_bytes_per_s=10_000_000.0,
    latency_s=0.001,
)


def test_one_client_by_hand() -> None:
    clock = VirtualClock({0: SLOW})
    t = clock.client_timing(
        ClientWork(client=0, bytes_down=2_000_000, samples=50, bytes_up=1_000_000)
    )
    # download 0.01 + 2 s, compute 50/100 = 0.5 s, upload 0.01 + 2 s
    assert t.download_s == pytest.approx(2.01)
    assert t.compute_s == pytest.approx(0.5)
    assert t.upload_s == pytest.approx(2.01)
    assert t.total_s == pytest.approx(4.52)


def test_round_waits_for_the_slowest_client_and_time_accumulates() -> None:
    clock = VirtualClock({0: SLOW, 1: FAST})
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
        VirtualClock({0: SLOW}).client_timing(ClientWork(3, 1, 1, 1))
    with pytest.raises(ValueError, match="uplink bandwidth must be > 0"):
        DeviceProfile("bad", 1.0, 0.0, 1.0, 0.0)
