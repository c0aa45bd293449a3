"""int8: 8-bit values with a per-message scale and stochastic rounding."""

import dataclasses

import numpy as np
import pytest
from flwr.app import ArrayRecord, RecordDict

from collectives.allgather import Allgather
from common.data import DIGITS_SPEC
from common.models import build_model
from common.params import model_to_vector
from compress import ENCODINGS
from compress.error_feedback import ErrorFeedback
from compress.float32 import Float32
from compress.int8 import LEVELS, QUANTISED, SCALE, Int8
from tests.helpers import (
    assert_replicas_hold_the_model_before_last,
    client_job,
    federation_settings,
    last_round,
    run_in_process,
)
from wire.codec import PayloadError, Sparse, raw_array
from wire.nbytes import content_nbytes

Q8 = Int8()


def _values(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_registered_under_its_setting_name() -> None:
    assert ENCODINGS["int8"] is Int8


def test_decoding_recovers_each_value_within_one_step() -> None:
    values = _values(1000)
    encoded = Q8.encode(values, np.random.default_rng(1))
    decoded = Q8.decode(ArrayRecord(encoded.arrays), 1000)
    np.testing.assert_array_equal(decoded, encoded.decoded)  # the server sees what EF assumed
    step = np.abs(values).max() / LEVELS
    assert np.all(np.abs(decoded - values) <= step * (1 + 1e-6))
    assert np.abs(decoded).max() == pytest.approx(np.abs(values).max(), rel=1e-6)


def test_stochastic_rounding_is_unbiased_and_seeded() -> None:
    values = _values(50, seed=2) * 0.01
    first = Q8.encode(values, np.random.default_rng(7)).decoded
    np.testing.assert_array_equal(first, Q8.encode(values, np.random.default_rng(7)).decoded)
    assert not np.array_equal(first, Q8.encode(values, np.random.default_rng(8)).decoded)
    mean = np.mean([Q8.encode(values, np.random.default_rng(s)).decoded for s in range(4000)], 0)
    step = np.abs(values).max() / LEVELS
    # Deterministic rounding to nearest would be off by up to step / 2; the mean is unbiased.
    assert np.abs(mean - values).max() < 0.05 * step


def test_a_zero_vector_travels_as_zeros() -> None:
    encoded = Q8.encode(np.zeros(8, np.float32), np.random.default_rng(0))
    np.testing.assert_array_equal(Q8.decode(ArrayRecord(encoded.arrays), 8), np.zeros(8))


def test_a_quarter_of_the_bytes_of_float32() -> None:
    values = _values(5000)
    q8 = content_nbytes(
        RecordDict({"v": ArrayRecord(Q8.encode(values, np.random.default_rng(0)).arrays)})
    )
    f32 = content_nbytes(
        RecordDict({"v": ArrayRecord(Float32().encode(values, np.random.default_rng(0)).arrays)})
    )
    assert q8 < 0.26 * f32
    assert Q8.values_nbytes(5000) == 5004


def test_error_feedback_keeps_the_quantisation_error() -> None:
    rng = np.random.default_rng(3)
    state = RecordDict()
    residual = np.zeros(1000, np.float32)
    job_rng = np.random.default_rng(4)
    for _ in range(5):
        update = rng.standard_normal(1000).astype(np.float32)
        compensated = update + residual
        job = client_job(state, update, ratio=0.05)
        job = dataclasses.replace(job, encoding=Q8, rng=job_rng)
        payload = Allgather.client_train(job)
        assert payload.sparse is not None
        sent = Sparse.from_record(payload.sparse, 1000, 50, Q8.decode)
        residual = ErrorFeedback.from_state(state, 1000).residual
        # What arrived plus what is kept is what was computed (up to float32 rounding).
        np.testing.assert_allclose(sent.dense() + residual, compensated, rtol=0, atol=1e-6)
        assert np.count_nonzero(residual[sent.indices]) > 0  # the rounding error waits


def test_non_finite_values_travel_so_that_the_server_refuses_them() -> None:
    values = _values(10)
    values[3] = np.nan
    encoded = Q8.encode(values, np.random.default_rng(0))
    assert np.all(np.isnan(encoded.decoded))  # error feedback keeps the NaN, as with float32
    with pytest.raises(PayloadError, match="scale must be"):
        Q8.decode(ArrayRecord(encoded.arrays), 10)


def test_only_the_star_topology_charges_8_bit_values() -> None:
    from common.settings import ConfigError, settings_with

    assert settings_with(encoding="int8", collective="allgather").timing.topology == "star"
    with pytest.raises(ConfigError, match="can only be charged on the star topology"):
        settings_with(encoding="int8", collective="allgather", topology="ring")


def _record(**arrays: object) -> ArrayRecord:
    good = Q8.encode(_values(10), np.random.default_rng(0)).arrays
    out = dict(good)
    for name, array in arrays.items():
        if array is None:
            del out[name]
        else:
            out[name] = array  # type: ignore[assignment]
    return ArrayRecord(out)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (_record(**{QUANTISED: None}), "'quantised' is missing"),
        (_record(**{SCALE: None}), "'scale' is missing"),
        (_record(**{QUANTISED: raw_array(np.zeros(9, np.int8))}), "9 quantised values"),
        (_record(**{QUANTISED: raw_array(np.zeros(10, np.int16))}), "dtype int16"),
        (_record(**{SCALE: raw_array(np.array([np.nan], np.float32))}), "scale must be"),
        (_record(**{SCALE: raw_array(np.array([-1.0], np.float32))}), "scale must be"),
        (_record(**{SCALE: raw_array(np.array([1.0, 2.0], np.float32))}), "scale must be"),
        (_record(**{SCALE: raw_array(np.array([3e38], np.float32))}), "infinite"),
    ],
)
def test_malformed_payloads_are_refused_by_name(record: ArrayRecord, reason: str) -> None:
    with pytest.raises(PayloadError, match=reason):
        Q8.decode(record, 10)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_federated_rounds_with_8_bit_values(collective: str) -> None:
    common = {"collective": collective, "compression_ratio": 0.05}
    final, strategy, grid, stats = run_in_process(
        federation_settings(encoding="int8", **common), rounds=4
    )
    baseline, float32, _, float32_stats = run_in_process(federation_settings(**common), rounds=4)
    # Replicas stay equal to the server's model (the downlink is not quantised).
    assert_replicas_hold_the_model_before_last(strategy, grid, final)
    # Uplink: values shrink to a quarter; indices (allgather) stay.
    phase = "train" if collective == "allgather" else "values"
    up = {
        s: {p["name"]: p["bytes_up"] for p in last_round(r).phases}[phase]
        for s, r in (("q8", strategy), ("f32", float32))
    }
    assert up["q8"] < (0.7 if collective == "allgather" else 0.3) * up["f32"]
    # The quantised run follows the float32 one: far closer to it than to where both started.
    settings = federation_settings(**common)
    start = model_to_vector(
        build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    )
    moved = np.linalg.norm(baseline - start)
    assert moved > 0 and np.linalg.norm(final - baseline) < 0.25 * moved
