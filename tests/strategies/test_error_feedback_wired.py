"""Error feedback is wired into every compressed collective, with every selector and encoding.

On tests/ef_problem.py's quadratic (no data set), Top-k without error feedback never leaves
the start, and every compressed collective with error feedback reaches the optimum: the real
strategy and ClientApp handlers, in process, every message serialized. And the invariant of
error feedback for every selector and encoding: what a client computed (its update plus its
old residual) is what the server decodes plus its new residual.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.app import RecordDict

from client.app import make_app
from collectives.allgather import Allgather
from collectives.allreduce import Allreduce
from compress import ENCODINGS, SELECTORS
from compress.error_feedback import ErrorFeedback
from server.build import build_strategy
from testing.in_process import InProcessGrid, train_in_process
from tests import ef_problem
from tests.helpers import client_job, federation_settings, unit_clock
from timing.devices import DeviceProfile
from wire.codec import Sparse
from wire.layout import Layout

CLIENTS = 4
PROFILE = DeviceProfile("p", 1000.0, 0.0, 1e6, 1e6, 0.01)
PROBLEM = {
    "model": ef_problem.MODEL,
    "num_clients": CLIENTS,
    "learning_rate": 0.03,
    "compression_ratio": ef_problem.CANCELLING / ef_problem.SIZE,
    "robust": "none",  # the clients pull apart on purpose: no defence judges them here
}
ROUNDS = 120
# collective and what it sends -> the settings (index-policy global freezes by design: left out)
WIRED = {
    "allgather topk": {"collective": "allgather"},
    "allgather randomk": {"collective": "allgather", "selector": "randomk"},
    "allreduce leader": {"collective": "allreduce"},
    "allreduce var leader": {"collective": "allreduce", "leader": "var"},
    "allreduce residual-hints": {"collective": "allreduce", "index_policy": "residual-hints"},
    "allreduce randomk": {"collective": "allreduce", "selector": "randomk"},
    "powersgd": {"collective": "powersgd"},
    **{
        f"allgather topk {encoding}": {"collective": "allgather", "encoding": encoding}
        for encoding in ENCODINGS
        if encoding != "float32"
    },
}


def _distance(overrides: dict[str, Any]) -> float:
    """||x - x*|| after ``ROUNDS`` rounds (the start is ||x*||)."""
    settings = federation_settings(**PROBLEM, **overrides)
    model = ef_problem.matrix(None)  # type: ignore[arg-type]
    layout = Layout.of_model(model)
    clock = unit_clock(dict.fromkeys(range(CLIENTS), PROFILE))
    strategy = build_strategy(settings, clock, layout)
    grid = InProcessGrid(settings, app=make_app(trainer=ef_problem.quadratic_step))
    final = layout.flatten(train_in_process(strategy, settings, model, grid, ROUNDS))
    return float(np.linalg.norm(final - ef_problem.optimum(CLIENTS)))


START = float(np.linalg.norm(ef_problem.optimum(CLIENTS)))


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_topk_without_error_feedback_never_leaves_the_start(
    collective: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every residual dropped as soon as it is kept: compression without error feedback.
    monkeypatch.setattr(ErrorFeedback, "to_state", lambda self, state: None)
    distance = _distance({"collective": collective})
    assert distance == pytest.approx(START, rel=1e-6)


@pytest.mark.usefixtures("task_identity")
@pytest.mark.parametrize("name", list(WIRED))
def test_with_error_feedback_every_compressed_collective_reaches_the_optimum(name: str) -> None:
    assert _distance(WIRED[name]) < 0.25 * START


@pytest.mark.parametrize("selector", list(SELECTORS))
@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("collective", [Allgather, Allreduce])
def test_update_is_what_arrives_plus_the_new_residual(
    selector: str, encoding: str, collective: Any
) -> None:
    """update + old residual = decoded + new residual, entry by entry (float32 rounding aside),
    for the one-phase client halves (the leader phases: tests/strategies/test_error_feedback)."""
    rng = np.random.default_rng(5)
    state, size, ratio = RecordDict(), 300, 0.05
    old = rng.standard_normal(size).astype(np.float32)
    ErrorFeedback(old).to_state(state)
    update = rng.standard_normal(size).astype(np.float32)
    sent_set = collective is Allreduce and not SELECTORS[selector].draws  # one-phase Top-k
    content = _instruction(size, 15 if sent_set else 0)
    job = client_job(
        state, update, ratio, selector, encoding, run_seed=3, partition_id=1, content=content
    )
    record = collective.client_train(job).sparse
    plan_indices = _indices(job, collective, record, size)
    decoded = Sparse(plan_indices, job.encoding.decode(record, plan_indices.size), size)
    new = ErrorFeedback.from_state(state, size).residual
    np.testing.assert_allclose(decoded.dense() + new, update + old, rtol=0, atol=1e-5)
    assert np.any(decoded.values)


def _instruction(size: int, count: int) -> RecordDict:
    """An instruction's content: its config (no hints asked) and, with ``count``, a one-phase
    policy's index set."""
    from flwr.app import ConfigRecord

    from wire.codec import indices_record
    from wire.keys import CONFIG_KEY, INDEX_SET_KEY

    content = RecordDict({CONFIG_KEY: ConfigRecord({})})
    if count:
        chosen = np.sort(np.random.default_rng(2).choice(size, count, replace=False))
        content[INDEX_SET_KEY] = indices_record(chosen, size)
    return content


def _indices(job: Any, collective: Any, record: Any, size: int) -> np.ndarray:
    from wire.codec import INDEX_ARRAYS, decode_indices
    from wire.keys import INDEX_SET_KEY

    if job.selector.draws:
        seed = job.own_seed if collective is Allgather else job.shared_seed
        return job.selector.drawn(size, job.k, job.whole, seed)
    if INDEX_ARRAYS & set(record):
        return np.sort(decode_indices(record, size))
    return decode_indices(job.content[INDEX_SET_KEY], size)
