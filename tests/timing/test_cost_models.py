from collections.abc import Callable

import pytest

from timing import cost as cm
from timing.cost import Link

# N = 4, M = 1000 bytes, α = 10 ms, β = 1 ms per byte (1 kB/s): log2 N = 2.
LINK = Link(alpha_s=0.01, beta_s_per_byte=0.001)


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (cm.star, 2 * 0.01 + 2 * 3 * 1.0),  # 6.02
        (cm.ring_allreduce, 2 * 3 * 0.01 + 2 * 0.75 * 1.0),  # 1.56
        (cm.tree_allreduce, 2 * 0.01 * 2 + 2 * 2 * 1.0),  # 4.04
        (cm.broadcast, 0.01 * 2 + 2 * 1.0),  # 2.02
        (cm.allgather, 0.01 * 2 + 3 * 1.0),  # 3.02
    ],
)
def test_dense_collectives_by_hand(
    kind: Callable[[int, float, Link], float], expected: float
) -> None:
    assert kind(4, 1000, LINK) == pytest.approx(expected)


def test_compressed_exchanges_by_hand() -> None:
    assert cm.allgather_topk(4, 1000, 0.1, LINK) == pytest.approx(0.02 + 0.6)
    assert cm.artopk_ring(4, 1000, 0.1, LINK) == pytest.approx(0.08 + 0.35)
    assert cm.artopk_tree(4, 1000, 0.1, LINK) == pytest.approx(0.06 + 0.6)


@pytest.mark.parametrize("n", [4, 8, 16, 32])
@pytest.mark.parametrize(
    ("bound", "first", "second"),
    [
        (cm.ring_over_tree_bound, cm.artopk_ring, cm.artopk_tree),
        (cm.ring_over_allgather_bound, cm.artopk_ring, cm.allgather_topk),
        (cm.tree_over_allgather_bound, cm.artopk_tree, cm.allgather_topk),
    ],
)
def test_cross_overs_are_where_the_cost_functions_swap(n, bound, first, second) -> None:  # type: ignore[no-untyped-def]
    model_bytes, ratio, beta = 4e6, 0.01, 1e-9
    alpha_over_beta = bound(n, model_bytes, ratio)
    if alpha_over_beta == 0:  # tree vs allgather at N = 4: equal bandwidth terms
        some_latency = Link(alpha_s=1e-3, beta_s_per_byte=beta)
        assert second(n, model_bytes, ratio, some_latency) < first(
            n, model_bytes, ratio, some_latency
        )
        return
    assert alpha_over_beta > 0
    below = Link(alpha_s=0.9 * alpha_over_beta * beta, beta_s_per_byte=beta)
    above = Link(alpha_s=1.1 * alpha_over_beta * beta, beta_s_per_byte=beta)
    assert first(n, model_bytes, ratio, below) < second(n, model_bytes, ratio, below)
    assert first(n, model_bytes, ratio, above) > second(n, model_bytes, ratio, above)


def test_high_latency_or_small_ratio_favours_allgather() -> None:
    fast_lan = Link.from_bandwidth(latency_s=1e-4, bytes_per_s=125e6)  # 0.1 ms, 1 Gbit/s
    lte = Link.from_bandwidth(latency_s=0.05, bytes_per_s=125e6)  # 50 ms, same bandwidth
    assert cm.artopk_ring(8, 4e6, 0.1, fast_lan) < cm.allgather_topk(8, 4e6, 0.1, fast_lan)
    assert cm.artopk_ring(8, 4e6, 0.1, lte) > cm.allgather_topk(8, 4e6, 0.1, lte)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="beta must be > 0"):
        Link(0.0, 0.0)
    with pytest.raises(ValueError, match="latency must be >= 0"):
        Link(-1.0, 1.0)
    with pytest.raises(ValueError, match="at least one worker"):
        cm.star(0, 10, LINK)


def test_star_topk_modes_by_hand() -> None:
    from collectives.allgather import Allgather
    from collectives.allreduce import Allreduce
    from timing.cost import MESSAGE_OVERHEAD_BYTES as OV
    from timing.link_estimator import LinkEstimate
    from wire.codec import index_nbytes

    fast = LinkEstimate(latency_s=0.001, uplink_bytes_per_s=1e6, downlink_bytes_per_s=2e6)
    slow = LinkEstimate(latency_s=0.05, uplink_bytes_per_s=1e5, downlink_bytes_per_s=2e5)
    d, k, union = 50_000, 500, 1200
    idx_k, idx_u = index_nbytes(k, d), index_nbytes(union, d)
    assert idx_k == 2000 and idx_u == 4800
    # Allgather: slowest of (down union update + compute + up TopK).
    expected = 0.05 + (4 * union + idx_u + OV) / 2e5 + 0.2 + 0.05 + (4 * k + idx_k + OV) / 1e5
    got = Allgather.predict_star_s([fast, slow], [0.1, 0.2], k, union, d, 4 * k)
    assert got == pytest.approx(expected)
    # Allreduce: train + indices + values phases, each at its slowest client.
    train = 0.05 + (4 * k + idx_k + OV) / 2e5 + 0.2 + 0.05 + OV / 1e5
    indices = 0.05 + OV / 2e5 + 0.05 + (idx_k + OV) / 1e5
    values = 0.05 + (idx_k + OV) / 2e5 + 0.05 + (4 * k + OV) / 1e5
    got = Allreduce.predict_star_s([fast, slow], [0.1, 0.2], k, d, 4 * k)
    assert got == pytest.approx(train + indices + values)
    # One-phase policies: down the update and the index set, compute, up values (and hints).
    one_phase = 0.05 + (4 * k + 2 * idx_k + OV) / 2e5 + 0.2 + 0.05 + (4 * k + OV) / 1e5
    assert Allreduce.predict_star_s([fast, slow], [0.1, 0.2], k, d, 4 * k, 0.0) == pytest.approx(
        one_phase
    )
    hinted = Allreduce.predict_star_s([fast, slow], [0.1, 0.2], k, d, 4 * k, 0.25)
    assert hinted == pytest.approx(one_phase + index_nbytes(125, d) / 1e5)
    assert hinted < train + indices + values
