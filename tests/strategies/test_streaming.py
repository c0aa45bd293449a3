"""Streaming clients through the strategies, in process, and the server-side rules."""

import numpy as np
import pytest

from collectives.base import Participant
from commands.run_config import parse_overrides, resolve_settings
from strategies.policies.lr import LastRound, learning_rate
from strategies.policies.weights import WEIGHTS
from tests.helpers import DIGITS_PROFILE, federation_settings, run_in_process
from wire.keys import BUFFER_BYTES, BUFFER_SAMPLES, STREAM_RATE, STREAM_SAMPLES, WAIT_S
from wire.train_reply import StreamReport, TrainReply

pytestmark = pytest.mark.usefixtures("task_identity")

# DIGITS_PROFILE computes 1000 samples/s: a batch of 16 takes 0.016 s.


def test_fixed_batches_wait_for_slow_streams_and_the_clock_charges_it() -> None:
    settings = federation_settings(collective="dense", stream_rates="4, 8, 200", batch_size=16)
    _, strategy, _, stats = run_in_process(settings, rounds=2)
    first = stats[1]
    # The slowest stream (4/s) has its 16th sample at 4.0 s; the round cannot end sooner.
    assert first.stream is not None and first.stream["wait_s_max"] == pytest.approx(4.0)
    assert first.round_time_s >= 4.0 + 16 / DIGITS_PROFILE.train_flops_per_s
    assert first.stream["batch_min"] == first.stream["batch_max"] == 16
    assert first.stream["rate_total"] == pytest.approx(212.0)


def test_persistence_piles_up_and_truncation_stays_small() -> None:
    peaks = {}
    for policy in ("persistence", "truncation"):
        settings = federation_settings(
            collective="dense", stream_rates="8, 8, 400", batch_size=16, buffer_policy=policy
        )
        _, strategy, _, stats = run_in_process(settings, rounds=4)
        peaks[policy] = [stats[r].stream["buffer_samples_max"] for r in range(1, 5)]
        times = [stats[r].virtual_time_s for r in range(1, 5)]  # same for both
    # The 400/s client: in round 1 it waits for its own 16 samples (0.04 s); later, by each
    # round's start it has received 400 x (time so far); persistence keeps all but 16 a round.
    assert peaks["persistence"][0] == 16
    for r in (2, 3, 4):
        start = times[r - 2]
        assert peaks["persistence"][r - 1] == pytest.approx(400 * start - 16 * (r - 1), abs=2)
    # Truncation keeps what arrived since the last step: 400 x the time between steps (the
    # round-1 step was at 0.04 s, later steps at their round's start).
    for r in (2, 3, 4):
        length = times[r - 2] - (times[r - 3] if r > 2 else 0.04)
        assert peaks["truncation"][r - 1] == pytest.approx(400 * length, abs=2)
    assert max(peaks["truncation"]) < max(peaks["persistence"]) / 2


def test_rate_batches_take_what_arrived_and_rate_weights_follow_the_rates() -> None:
    settings = federation_settings(
        collective="allgather",
        stream_rates="8, 16, 400",
        batch_policy="rate",
        buffer_policy="truncation",
        aggregation_weights="rate",
    )
    _, strategy, _, stats = run_in_process(settings, rounds=3)
    first = stats[1]
    assert first.stream is not None
    assert first.stream["wait_s_max"] == pytest.approx(1.0)  # 8/s waits for batch-min = 8
    for r in (2, 3):
        stream = stats[r].stream
        assert stream is not None and stream["batch_min"] >= 8 and stream["batch_max"] <= 1024


def test_weights_and_learning_rate_scaling() -> None:
    def participants(examples: list[int], reports: list[StreamReport | None]) -> list[Participant]:
        return [
            Participant(i, TrainReply(i, n, 0.0, stream=r), bytes_up=0, measured=None)
            for i, (n, r) in enumerate(zip(examples, reports, strict=True))
        ]

    reports: list[StreamReport | None] = [
        StreamReport(10.0, 0.0, 5, 50, 8),
        StreamReport(30.0, 0.0, 5, 50, 8),
    ]
    assert WEIGHTS["rate"](participants([100, 100], reports)) == [10.0, 30.0]
    assert WEIGHTS["examples"](participants([100, 300], reports)) == [100.0, 300.0]
    assert WEIGHTS["uniform"](participants([100, 300], reports)) == [1.0, 1.0]
    with pytest.raises(ValueError, match="needs streaming clients"):
        WEIGHTS["rate"](participants([1, 2], [None, None]))

    def last(global_batch: int) -> LastRound:
        return LastRound(global_batch=global_batch, batch_size=32, num_clients=10)

    assert learning_rate("linear", 0.5, None, 0.0) == 0.5  # nothing reported yet
    assert learning_rate("linear", 0.5, last(640), 0.0) == pytest.approx(1.0)  # 2x the base
    assert learning_rate("none", 0.5, last(640), 0.0) == 0.5
    # A cap binds only above it: 15x the base batch is held at 4x, 2x stays 2x.
    assert learning_rate("linear", 0.5, last(4800), 4.0) == pytest.approx(2.0)
    assert learning_rate("linear", 0.5, last(640), 4.0) == pytest.approx(1.0)


def test_linear_scaling_follows_the_last_global_batch() -> None:
    settings = federation_settings(
        collective="dense",
        stream_rates="8, 8, 8",
        batch_policy="rate",
        batch_size=16,
        lr_scaling="linear",
    )
    _, strategy, _, stats = run_in_process(settings, rounds=3)
    assert stats[1].learning_rate == pytest.approx(settings.training.learning_rate)
    # Round 1: every client trained on batch-min = 8, the base batch is 16 per client.
    assert stats[2].learning_rate == pytest.approx(settings.training.learning_rate * 24 / 48)


GOOD = {STREAM_RATE: 1.0, WAIT_S: 0.0, BUFFER_SAMPLES: 1, BUFFER_BYTES: 8, STREAM_SAMPLES: 8}


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({STREAM_RATE: 5.0}, "incomplete"),
        ({**GOOD, STREAM_RATE: -1.0}, "stream-rate"),
        ({**GOOD, WAIT_S: np.nan}, "wait-s"),
        ({**GOOD, BUFFER_SAMPLES: 1.5}, "buffer-samples"),
        ({**GOOD, STREAM_SAMPLES: -2}, "stream-samples"),
    ],
)
def test_malformed_stream_reports_are_named(metrics: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StreamReport.parse(metrics)


def test_streams_compose_with_the_nsga2_schedule_and_auto() -> None:
    settings = federation_settings(
        collective="auto",
        cr_schedule="nsga2",
        cr_warmup_rounds=2,
        cr_generations=5,
        stream_rates="S2",
        batch_policy="rate",
        buffer_policy="truncation",
        aggregation_weights="rate",
        lr_scaling="linear",
    )
    _, strategy, _, stats = run_in_process(settings, rounds=5)
    assert all(stats[r].stream is not None for r in range(1, 6))
    assert any(stats[r].ratio_policy.get("ratio_solve") is not None for r in range(3, 6))


@pytest.mark.parametrize(
    "presets",
    [
        "configs/dsgd.toml",
        "configs/scadles.toml",
        "configs/scadles.toml configs/scadles-noniid.toml",
        "configs/scadles.toml configs/scadles-noniid-injection.toml",
    ],
)
def test_presets_are_valid_settings(presets: str) -> None:
    settings = resolve_settings(parse_overrides(presets))
    assert settings.streams.stream_rates == "S1-normal"


def test_same_seed_same_streaming_run() -> None:
    settings = federation_settings(
        collective="allgather",
        compression_ratio=0.1,
        adaptive_delta=0.3,
        stream_rates="S1",
        batch_policy="rate",
        buffer_policy="truncation",
        aggregation_weights="rate",
        lr_scaling="linear",
        injection_alpha=0.5,
        injection_beta=0.5,
        num_clients=4,
    )
    first, run_a, _, run_a_stats = run_in_process(settings, rounds=4)
    second, run_b, _, run_b_stats = run_in_process(settings, rounds=4)
    assert np.array_equal(first, second)
    for r in range(1, 5):
        a, b = run_a_stats[r], run_b_stats[r]
        assert (a.virtual_time_s, a.stream, a.injection, a.ratio_policy) == (
            b.virtual_time_s,
            b.stream,
            b.injection,
            b.ratio_policy,
        )
