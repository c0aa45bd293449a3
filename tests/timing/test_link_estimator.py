"""What the link estimator guarantees today (the noisy 10 % bar of issue 4 is not met yet)."""

import numpy as np
import pytest

from timing.link_estimator import DOWN, UP, LinkEstimator

MB = 1e6 / 8
SIZES = [150, 2200, 4200, 40_000, 200_000]


def _feed(
    est: LinkEstimator,
    link: tuple[float, float, float],
    count: int,
    rng: np.random.Generator,
    noise: float = 0.0,
) -> None:
    latency, up, down = link
    for _ in range(count):
        for direction, rate in ((UP, up), (DOWN, down)):
            nbytes = int(rng.choice(SIZES))
            factor = rng.uniform(1 - noise, 1 + noise) if noise else 1.0
            est.observe(0, direction, nbytes, (latency + nbytes / rate) * factor)


def _close(est: LinkEstimator, link: tuple[float, float, float], rel: float) -> None:
    e = est.estimate(0)
    assert e is not None
    assert e.latency_s == pytest.approx(link[0], rel=rel)
    assert e.uplink_bytes_per_s == pytest.approx(link[1], rel=rel)
    assert e.downlink_bytes_per_s == pytest.approx(link[2], rel=rel)


def test_recovers_latency_and_both_bandwidths_from_varied_sizes() -> None:
    est = LinkEstimator()
    link = (0.05, 5 * MB, 25 * MB)
    _feed(est, link, 12, np.random.default_rng(0))
    _close(est, link, rel=1e-6)


def test_re_converges_after_a_segment_change() -> None:
    rng = np.random.default_rng(1)
    est = LinkEstimator(window=64)
    _feed(est, (0.05, 5 * MB, 25 * MB), 30, rng)
    new = (0.001, 1 * MB, 1 * MB)
    _feed(est, new, 6, rng)  # 12 observations after the change
    _close(est, new, rel=1e-6)


def test_one_size_per_direction_keeps_the_known_latency() -> None:
    rng = np.random.default_rng(2)
    est = LinkEstimator()
    _feed(est, (0.02, 5 * MB, 10 * MB), 10, rng)
    for _ in range(30):  # only allgather-sized messages from now on, at lower bandwidth
        est.observe(0, UP, 4200, 0.02 + 4200 / (2 * MB))
        est.observe(0, DOWN, 40_000, 0.02 + 40_000 / (4 * MB))
    _close(est, (0.02, 2 * MB, 4 * MB), rel=1e-6)


def test_tolerates_noise_in_a_latency_dominated_regime() -> None:
    est = LinkEstimator(window=96)
    link = (0.05, 1 * MB, 2 * MB)  # every size's time is well above the noise floor
    _feed(est, link, 48, np.random.default_rng(3), noise=0.2)
    _close(est, link, rel=0.10)


def test_re_converges_under_noise_after_a_segment_change() -> None:
    """Across seeds 0..49 this holds for 49 (printed by the closing note's command)."""
    rng = np.random.default_rng(4)
    est = LinkEstimator(window=96)
    _feed(est, (0.05, 1 * MB, 2 * MB), 48, rng, noise=0.2)
    new = (0.02, 0.25 * MB, 0.5 * MB)
    _feed(est, new, 48, rng, noise=0.2)
    _close(est, new, rel=0.10)


def test_fitting_when_asked_gives_what_fitting_every_observation_gives() -> None:
    """Fits run when an estimate or the state is asked for: the estimates, histories and
    surprise counts are those of asking after every observation, through a link change."""
    every, asked_once = LinkEstimator(window=16), LinkEstimator(window=16)
    rng = np.random.default_rng(5)
    links = [(0.05, 1 * MB, 2 * MB)] * 20 + [(0.01, 0.2 * MB, 0.3 * MB)] * 20
    for step, (latency, up, down) in enumerate(links):
        for client in (0, 1):
            for direction, rate in ((UP, up), (DOWN, down)):
                nbytes = int(rng.choice(SIZES))
                seconds = (latency + nbytes / rate) * rng.uniform(0.9, 1.1)
                for est in (every, asked_once):
                    est.observe(client, direction, nbytes, seconds)
            every.estimate(client)
        if step == 25:  # a checkpoint in between fits what is waiting
            assert asked_once.state_dict() == every.state_dict()
    assert asked_once.estimate(0) == every.estimate(0)
    assert asked_once.state_dict() == every.state_dict()
    assert every.estimate(1) is not None and every.estimate(1) != every.estimate(0)
