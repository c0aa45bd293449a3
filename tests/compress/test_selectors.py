"""Selectors: which coordinates a client sends. Top-k's depend on e; random-k's come from a seed
the receiver draws itself."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ArrayRecord

from collectives.allgather import Allgather
from collectives.base import ClientJob
from compress import SELECTORS
from compress.base import SelectionSeed
from tests.helpers import client_job, federation_settings, run_in_process
from wire.codec import PayloadError, indices_record

RANDOMK = SELECTORS["randomk"]
WHOLE = np.array([3, 7], dtype=np.int64)


def _e(n: int = 100) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32)


def test_topk_takes_the_largest_entries_and_the_whole_ones() -> None:
    e = _e()
    chosen = SELECTORS["topk"].select(e, 5, WHOLE, SelectionSeed(1, 1, 0))
    outside = np.delete(np.arange(100), WHOLE)
    largest = outside[np.argsort(-np.abs(e[outside]))[:5]]
    np.testing.assert_array_equal(chosen, np.union1d(largest, WHOLE))
    assert not SELECTORS["topk"].draws


def test_randomk_draws_k_outside_the_whole_ones_from_its_seed_alone() -> None:
    seed = SelectionSeed(run_seed=1, server_round=4, partition_id=2)
    chosen = RANDOMK.select(_e(), 10, WHOLE, seed)
    assert chosen.size == 12 and np.all(np.diff(chosen) > 0)
    assert set(WHOLE) <= set(chosen.tolist())
    np.testing.assert_array_equal(chosen, RANDOMK.drawn(100, 10, WHOLE, seed))  # no e needed
    np.testing.assert_array_equal(chosen, RANDOMK.select(-_e(), 10, WHOLE, seed))


def test_randomk_draws_differ_by_client_and_round_and_the_shared_one_is_everyones() -> None:
    own = [RANDOMK.drawn(1000, 10, WHOLE, SelectionSeed(1, 4, p)) for p in range(3)]
    assert len({tuple(o) for o in own}) == 3
    later = RANDOMK.drawn(1000, 10, WHOLE, SelectionSeed(1, 5, 0))
    assert not np.array_equal(later, own[0])
    shared = SelectionSeed(1, 4)
    assert shared.partition_id is None
    np.testing.assert_array_equal(
        RANDOMK.drawn(1000, 10, WHOLE, shared), RANDOMK.drawn(1000, 10, WHOLE, SelectionSeed(1, 4))
    )


def test_every_coordinate_is_drawn_about_equally_often() -> None:
    counts = np.zeros(50)
    for r in range(2000):
        counts[RANDOMK.drawn(50, 5, np.zeros(0, np.int64), SelectionSeed(0, r))] += 1
    # 2000 x 5 / 50 = 200 each, binomial sd 13.4: within 3.4 sd
    assert counts.min() > 0.7 * 200 and counts.max() < 1.3 * 200


def test_a_randomk_allgather_reply_carries_values_only() -> None:
    from flwr.app import RecordDict

    job: ClientJob = client_job(RecordDict(), _e(), 0.1, "randomk", run_seed=1, partition_id=2)
    record = Allgather.client_train(job).sparse
    assert record is not None and set(record) == {"values"}


def test_the_server_decodes_at_the_coordinates_it_draws_and_refuses_sent_indices() -> None:
    from flwr.app import RecordDict

    from compress.float32 import Float32

    e = _e()
    job: ClientJob = client_job(RecordDict(), e, 0.1, "randomk", run_seed=1, partition_id=2)
    record = Allgather.client_train(job).sparse
    assert record is not None
    plan = SimpleNamespace(
        selector=RANDOMK,
        encoding=Float32(),
        size=100,
        k=10,
        seed_of=lambda partition: SelectionSeed(1, 1, partition),
    )
    decoded = Allgather().decode(SimpleNamespace(sparse=record, partition_id=2), plan)  # type: ignore[arg-type]
    np.testing.assert_array_equal(decoded.dense()[decoded.indices], e[decoded.indices])
    forged = ArrayRecord({**record, **indices_record(np.arange(10, dtype=np.int64), 100)})
    with pytest.raises(PayloadError, match="indices sent, but the server draws"):
        Allgather().decode(SimpleNamespace(sparse=forged, partition_id=2), plan)  # type: ignore[arg-type]


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_randomk_federations_train_and_send_no_index(collective: str) -> None:
    settings = federation_settings(collective=collective, selector="randomk", compression_ratio=0.1)
    topk = federation_settings(collective=collective, compression_ratio=0.1)
    final, _, _, rounds = run_in_process(settings, rounds=3)
    _, _, _, topk_rounds = run_in_process(topk, rounds=3)
    assert np.isfinite(final).all() and not any(rounds[r].refused for r in rounds)
    assert rounds[3].train_loss < rounds[1].train_loss
    # one phase, values only: fewer bytes up than Top-k's values with their indices
    assert rounds[2].bytes_up < topk_rounds[2].bytes_up
    assert [p["name"] for p in rounds[2].phases] == ["train"]
