"""PowerSGD, both halves: the client's two exchanges keep error feedback exact, and with the
ServerApp's strategy and the ClientApp over the serialized wire (in process) it is dense at
full rank and trains at low rank."""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from flwr.app import Message, RecordDict

from collectives.base import ClientAction, ClientJob
from collectives.powersgd import P_HAT_KEY, Q_ACTION, TRAIN_Q, PowerSgd
from compress import SELECTORS, low_rank
from compress.error_feedback import RESIDUAL_KEY, ErrorFeedback
from compress.float32 import Float32
from state.vectors import load_vector
from testing.in_process import InProcessGrid
from tests.helpers import (
    assert_replicas_hold_the_model_before_last,
    federation_settings,
    run_in_process,
)
from wire.codec import decode_values, raw_array, values_record
from wire.keys import SPARSE_KEY, VALUES
from wire.layout import Layout
from wire.phases import PhaseRequest

pytestmark = pytest.mark.usefixtures("task_identity")

LAYOUT = Layout(("fc1.weight", "fc1.bias", "fc2.weight"), ((6, 4), (6,), (3, 6)))


def test_update_is_what_was_sent_plus_the_new_residual() -> None:
    """Error feedback over the two exchanges: update + old residual = the client's own decoded
    share (P̂ Q_iᵀ per matrix, the dense values) + the new residual, whatever P̂ the server
    sends."""
    rng = np.random.default_rng(3)
    update = rng.standard_normal(LAYOUT.size).astype(np.float32)
    old = rng.standard_normal(LAYOUT.size).astype(np.float32)
    state = RecordDict()
    ErrorFeedback(old).to_state(state)
    server = PowerSgd(LAYOUT, np.zeros(0, dtype=np.int64), seed=1, rank=2)
    instruction = RecordDict(server.round_records(0.5))
    job = ClientJob(
        state,
        update,
        SimpleNamespace(round=SimpleNamespace(server_round=1)),  # type: ignore[arg-type]
        LAYOUT,
        SELECTORS["topk"],
        Float32(),
        np.random.default_rng(0),
        content=instruction,
    )
    sent = PowerSgd.client_train(job).sparse
    shape = server.shape(0.5)
    assert shape.ranks == (2, 2)
    first = decode_values(sent, shape.p_count + shape.dense.size)  # type: ignore[arg-type]
    p_hat = [low_rank.orthonormalise(p) for p in shape.split_p(first[: shape.p_count])]
    request = PhaseRequest(1, 0.5).to_content()
    request[P_HAT_KEY] = values_record(low_rank.flat(p_hat))
    action = ClientAction(state, PhaseRequest(1, 0.5), request, None, None)  # type: ignore[arg-type]
    own_q = shape.split_q(decode_values(PowerSgd.client_actions[Q_ACTION](action), shape.q_count))
    decoded = np.zeros(LAYOUT.size, dtype=np.float32)
    for block, p, q in zip(shape.blocks, p_hat, own_q, strict=True):
        block.of(decoded)[:] = low_rank.approximation(p, q)
    compensated = update + old
    decoded[shape.dense] = first[shape.p_count :]
    np.testing.assert_array_equal(first[shape.p_count :], compensated[shape.dense])
    residual = load_vector(state, RESIDUAL_KEY)
    assert residual is not None
    np.testing.assert_allclose(decoded + residual, compensated, atol=1e-5)
    assert np.all(residual[shape.dense] == 0)  # sent whole
    assert np.linalg.norm(residual) > 0.1  # rank 2 of 4: something was held back


def test_a_q_request_of_another_round_is_refused_and_leaves_the_state() -> None:
    state = RecordDict()
    server = PowerSgd(LAYOUT, np.zeros(0, dtype=np.int64), seed=1, rank=1)
    job = ClientJob(
        state,
        np.ones(LAYOUT.size, dtype=np.float32),
        SimpleNamespace(compression=None, round=SimpleNamespace(server_round=2)),  # type: ignore[arg-type]
        LAYOUT,
        SELECTORS["topk"],
        Float32(),
        np.random.default_rng(0),
        content=RecordDict(server.round_records(0.5)),
    )
    PowerSgd.client_train(job)
    before = {key: state[key] for key in state}
    late = ClientAction(state, PhaseRequest(1, 0.5), RecordDict(), None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="q request of round 1, but the update held is of round 2"):
        PowerSgd.client_actions[Q_ACTION](late)
    assert {key: state[key] for key in state} == before


def test_a_q_request_without_its_training_is_refused() -> None:
    action = ClientAction(RecordDict(), PhaseRequest(1, 0.5), RecordDict(), None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without a compensated update"):
        PowerSgd.client_actions[Q_ACTION](action)


def test_at_full_rank_the_rounds_are_the_dense_rounds() -> None:
    """Round after round: the update factors are rank-deficient (P̂ drops dependent columns),
    and the warm start draws those columns anew instead of keeping them zero."""
    dense, _, _, _ = run_in_process(federation_settings(collective="dense"), rounds=3)
    full, strategy, _, stats = run_in_process(
        federation_settings(collective="powersgd", powersgd_rank=1000), rounds=3
    )
    stats = stats[3]
    assert stats.num_clients == 3 and not stats.refused
    assert [phase["name"] for phase in stats.phases] == ["train", Q_ACTION]
    np.testing.assert_allclose(full, dense, atol=5e-5)


def test_a_dead_column_of_the_last_q_is_drawn_anew() -> None:
    server = PowerSgd(LAYOUT, np.zeros(0, dtype=np.int64), seed=1, rank=3)
    shape = server.shape(1.0)
    server.last_q = [np.ones((b.cols, 3), dtype=np.float32) for b in shape.blocks]
    server.last_q[0][:, 1] = 0.0  # P̂'s column 1 was dependent last round
    warm = server.warm_q(shape)
    drawn = low_rank.initial_q(shape.blocks[0].cols, 3, seed=1)
    np.testing.assert_array_equal(warm[0][:, 1], drawn[:, 1])
    np.testing.assert_array_equal(warm[0][:, [0, 2]], 1.0)
    np.testing.assert_array_equal(warm[1], 1.0)


def test_at_low_rank_it_trains_and_every_replica_holds_the_model() -> None:
    settings = federation_settings(collective="powersgd", powersgd_rank=2)
    final, strategy, grid, stats = run_in_process(settings, rounds=4)
    losses = [stats[r].train_loss for r in (1, 4)]
    assert losses[1] < losses[0]
    assert not any(stats[r].refused for r in range(1, 5))
    assert_replicas_hold_the_model_before_last(strategy, grid, final)
    # the warm start: Q of the last round, at rank 2, travels with the next instruction
    assert all(q is not None and q.shape[1] == 2 for q in strategy.collectives["powersgd"].last_q)


def test_the_replicas_get_the_factors_not_the_full_update() -> None:
    settings = federation_settings(collective="powersgd", powersgd_rank=2)
    _, strategy, _, stats = run_in_process(settings, rounds=3)
    assert strategy.replicas.last_compact is not None
    third = stats[3]
    assert third.model_payloads == {"delta": 3}
    model_bytes = 4 * strategy.layout.size
    train = third.phases[0]
    assert train["name"] == "train" and train["bytes_down"] < 3 * model_bytes / 10


def test_factors_from_a_hostile_sender_are_refused_with_a_reason() -> None:
    from flwr.app import ArrayRecord

    from compress.low_rank import FACTORED_P, Factored
    from wire.codec import raw_array
    from wire.keys import FACTORED_TABLE

    server = PowerSgd(LAYOUT, np.zeros(0, dtype=np.int64), seed=1, rank=1)
    shape = server.shape(1.0)
    p = [np.ones((b.rows, 1), dtype=np.float32) for b in shape.blocks]
    q = [np.ones((b.cols, 1), dtype=np.float32) for b in shape.blocks]
    good = Factored(shape, tuple(p), tuple(q), np.zeros(shape.dense.size, dtype=np.float32))
    decoded = Factored.from_record(good.to_record(), LAYOUT.size).to_sparse()
    np.testing.assert_array_equal(decoded.values, good.to_sparse().values)

    def with_array(name: str, values: np.ndarray) -> ArrayRecord:
        record = good.to_record()
        record[name] = raw_array(values)
        return record

    cases = {
        "does not fit": with_array(FACTORED_TABLE, np.array([0, 6, 4, 1, 20, 3, 6, 1])),
        "not rows of 4": with_array(FACTORED_TABLE, np.array([0, 6, 4])),
        "rank 5": with_array(FACTORED_TABLE, np.array([0, 6, 4, 5, 30, 3, 6, 1])),
        "expected 9": with_array(FACTORED_P, np.ones(4, dtype=np.float32)),
        "NaN": with_array(FACTORED_P, np.full(9, np.nan, dtype=np.float32)),
        "nobody reads": with_array("extra", np.ones(1, dtype=np.float32)),
    }
    for reason, record in cases.items():
        with pytest.raises(ValueError, match=reason):
            Factored.from_record(record, LAYOUT.size)


class RewriteFirst(InProcessGrid):
    """The in-process federation with ``rewrite`` applied to the first reply of the first
    exchange of type ``message_type``: one hostile client, once."""

    def __init__(self, settings: Any, message_type: str, rewrite: Any) -> None:
        super().__init__(settings)
        self.message_type, self.rewrite, self.done = message_type, rewrite, False

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        replies = super().send_and_receive(messages, timeout=timeout)
        if not self.done and messages and messages[0].metadata.message_type == self.message_type:
            self.rewrite(replies[0].content)
            self.done = True
        return replies


def _extra_array(content: RecordDict) -> None:
    content.array_records[SPARSE_KEY]["junk"] = raw_array(np.ones(1000, dtype=np.float32))


def _nan_values(content: RecordDict) -> None:
    record = content.array_records[SPARSE_KEY]
    count = record[VALUES].shape[0]
    record[VALUES] = raw_array(np.full(count, np.nan, dtype=np.float32))


def _short_values(content: RecordDict) -> None:
    content.array_records[SPARSE_KEY][VALUES] = raw_array(np.ones(3, dtype=np.float32))


@pytest.mark.parametrize(
    ("message_type", "rewrite", "reason"),
    [
        ("train", _extra_array, "arrays junk, values, expected values"),
        ("train", _short_values, "3 values, expected"),
        (TRAIN_Q, _nan_values, "NaN"),
        (TRAIN_Q, _extra_array, "arrays junk, values, expected values"),
        (TRAIN_Q, _short_values, "3 values, expected"),
    ],
)
def test_a_hostile_reply_in_either_exchange_is_refused_and_the_round_goes_on(
    message_type: str, rewrite: Any, reason: str
) -> None:
    settings = federation_settings(collective="powersgd", powersgd_rank=2)
    final, strategy, _, stats = run_in_process(
        settings, rounds=2, grid=RewriteFirst(settings, message_type, rewrite)
    )
    first = stats[1]
    assert first.num_clients == 2, first.refused
    (refused,) = first.refused
    assert reason in refused
    assert stats[2].num_clients == 3 and np.isfinite(final).all()


def test_settings_that_do_not_fit_powersgd_are_refused_before_the_run() -> None:
    from common.settings import ConfigError, settings_with

    low_rank_auto = {"collective": "auto", "auto_collectives": "allgather,powersgd"}
    with pytest.raises(ConfigError, match="sends low-rank factors as float32"):
        settings_with(encoding="int8", **low_rank_auto)
    with pytest.raises(ConfigError, match="sends low-rank factors as float32"):
        settings_with(selector="randomk", collective="powersgd")
    with pytest.raises(ConfigError, match="adaptive-delta votes"):
        settings_with(collective="powersgd", adaptive_delta=0.5)
    assert settings_with(collective="powersgd", robust="median").trust.robust
    with pytest.raises(ConfigError, match="name each of allgather, allreduce, powersgd"):
        settings_with(collective="auto", auto_collectives="powersgd,ring")
    with pytest.raises(ConfigError, match="has no model of"):
        settings_with(collective="powersgd", cr_schedule="nsga2")
