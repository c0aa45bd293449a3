"""How error feedback releases its residual (issue 35, item 4): 1-D arrays sent whole
(``topk-dense-vectors``), a sparsity warm-up (``sparsity-warmup-rounds``) and a bound on the
compensated update (``error-feedback-clip``)."""

import numpy as np
import pytest

from collectives.base import whole_entries
from common.data import DIGITS_SPEC
from common.models import build_model
from common.params import buffer_positions
from compress.error_feedback import RESIDUAL_KEY, ErrorFeedback
from state.vectors import load_vector
from strategies.policies.ratio import FixedRatio, SparsityWarmUp
from wire.codec import topk_count
from wire.layout import Layout


def test_vector_positions_are_the_arrays_of_at_most_one_dimension() -> None:
    layout = Layout(("w", "b", "count", "w2"), ((2, 3), (3,), (), (2, 2)))
    np.testing.assert_array_equal(layout.vector_positions(), [6, 7, 8, 9])


def test_sent_whole_adds_the_vectors_to_the_buffers_only_when_asked() -> None:
    model = build_model("mlp-bn", DIGITS_SPEC, seed=5)
    layout, buffers = Layout.of_model(model), buffer_positions(model)
    assert whole_entries(layout, buffers, vectors=False) is buffers
    whole = whole_entries(layout, buffers, vectors=True)
    biases_and_scales = 256 + 128 + 10 + 2 * (256 + 128)  # linear biases, norm scales, shifts
    assert whole.size == buffers.size + biases_and_scales
    assert np.isin(buffers, whole).all()


def test_clip_bounds_the_compensated_norm_and_spares_what_is_sent_whole() -> None:
    update = np.array([1.0, 0.0, 0.0, 5.0], dtype=np.float32)
    memory = ErrorFeedback(np.array([0.0, 3.0, 4.0, 1.0], dtype=np.float32))
    exempt = np.array([3], dtype=np.int64)
    unclipped = memory.compensate(update)
    np.testing.assert_array_equal(unclipped, [1.0, 3.0, 4.0, 6.0])
    clipped = memory.compensate(update, clip=2.0, exempt=exempt)
    # outside the exempt entry: ||e|| = √26, bound 2 x ||(1, 0, 0)|| = 2
    assert np.linalg.norm(clipped[:3]) == pytest.approx(2.0, rel=1e-6)
    np.testing.assert_allclose(clipped[:3] / clipped[0], [1.0, 3.0, 4.0], rtol=1e-6)  # direction
    assert clipped[3] == 6.0
    loose = memory.compensate(update, clip=10.0, exempt=exempt)  # within the bound: as it is
    np.testing.assert_array_equal(loose, unclipped)


def test_warm_up_sends_more_in_its_first_rounds_then_the_ratio() -> None:
    policy = SparsityWarmUp(FixedRatio(0.01), rounds=3)
    ratios = [policy.choose(t, None) for t in range(1, 6)]  # type: ignore[arg-type]
    np.testing.assert_allclose(ratios, [0.01**0.25, 0.1, 0.01**0.75, 0.01, 0.01], rtol=1e-12)


@pytest.mark.usefixtures("task_identity")
def test_dense_vectors_travel_whole_in_every_compressed_round() -> None:
    from tests.helpers import federation_settings, run_in_process

    model = build_model("mlp-bn", DIGITS_SPEC, seed=5)
    whole = whole_entries(Layout.of_model(model), buffer_positions(model), vectors=True)
    for collective in ("allgather", "allreduce"):
        settings = federation_settings(
            model="mlp-bn",
            collective=collective,
            compression_ratio=0.002,
            whole_vectors=True,
        )
        _, strategy, _, stats = run_in_process(settings, rounds=2)
        update = strategy.replicas.last_delta
        assert update is not None and not stats[2].refused
        assert np.isin(whole, update.indices).all()
        if collective == "allreduce":  # k weight matrices' entries beside the whole ones
            assert update.indices.size == topk_count(update.size, 0.002) + whole.size


@pytest.mark.usefixtures("task_identity")
def test_clip_keeps_the_residual_within_its_bound_in_a_federation() -> None:
    """At c = 0.002 the residual grows round after round; with the clip the compensated
    update, and so what it leaves behind, stays within clip x the update's norm."""
    from tests.helpers import federation_settings, run_in_process

    norms = {}
    for clip in (0.0, 1.5):
        settings = federation_settings(
            collective="allgather", compression_ratio=0.002, error_feedback_clip=clip
        )
        _, _, grid, _ = run_in_process(settings, rounds=4)
        residuals = [load_vector(c.state, RESIDUAL_KEY) for c in grid.contexts.values()]
        norms[clip] = max(float(np.linalg.norm(r)) for r in residuals if r is not None)
    assert norms[1.5] < 0.8 * norms[0.0]
