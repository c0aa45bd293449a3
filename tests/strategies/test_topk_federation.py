"""Top-k strategy and ClientApp together, round by round, in process."""

import numpy as np
import pytest
from flwr.app import ConfigRecord

from collectives.allreduce import LEADERS
from collectives.allreduce.leaders import claim_of
from collectives.allreduce.names import TOPK_NORM2
from collectives.base import Participant
from common.data import DIGITS_SPEC
from common.models import build_model
from common.params import buffer_positions, model_to_vector
from server.build import build_strategy
from testing.in_process import InProcessGrid
from tests.helpers import (
    DIGITS_PROFILE,
    assert_replicas_hold_the_model_before_last,
    federation_settings,
    last_round,
    run_in_process,
    unit_clock,
)
from wire.codec import index_nbytes, topk_count
from wire.layout import Layout

pytestmark = pytest.mark.usefixtures("task_identity")

MODES = {
    "allgather": {"collective": "allgather"},
    "allreduce-star": {"collective": "allreduce", "leader": "star"},
    "allreduce-var": {"collective": "allreduce", "leader": "var"},
    "allreduce-global": {"collective": "allreduce", "index_policy": "global"},
    "allreduce-residual-hints": {"collective": "allreduce", "index_policy": "residual-hints"},
}


@pytest.mark.parametrize("mode", list(MODES))
def test_ratio_one_gives_exactly_the_dense_model(mode: str) -> None:
    dense, _, _, _ = run_in_process(federation_settings(collective="dense"), rounds=3)
    topk, strategy, _, stats = run_in_process(
        federation_settings(compression_ratio=1.0, **MODES[mode]), rounds=3
    )
    np.testing.assert_array_equal(topk, dense)
    assert stats[3].num_clients == 3


@pytest.mark.parametrize("mode", list(MODES))
def test_batch_norm_statistics_travel_every_round_and_average_as_dense(mode: str) -> None:
    """Buffers are not Top-k candidates: every compressed round sends them whole, so after the
    first round the global batch-norm statistics are the dense run's (the weighted mean of the
    clients'), at any ratio. Held back by error feedback instead, several moving-average steps
    land at once and overshoot: at c = 0.002 the running variance of mlp-bn turned negative
    within 30 rounds (measured before the change)."""
    model = build_model("mlp-bn", DIGITS_SPEC, seed=5)
    buffers = buffer_positions(model)
    assert buffers.size == 2 * (256 + 128) + 2  # means, variances and two counters
    dense, _, _, _ = run_in_process(
        federation_settings(collective="dense", model="mlp-bn"), rounds=1
    )
    topk, strategy, _, stats = run_in_process(
        federation_settings(model="mlp-bn", compression_ratio=0.002, **MODES[mode]),
        rounds=2,  # the second round runs with the index set of the first (one-phase policies)
    )
    assert not any(stats[r].refused for r in (1, 2))
    first, _, _, _ = run_in_process(
        federation_settings(model="mlp-bn", compression_ratio=0.002, **MODES[mode]),
        rounds=1,
    )
    np.testing.assert_allclose(first[buffers], dense[buffers], rtol=1e-5, atol=1e-7)
    weights = np.setdiff1d(np.arange(first.size), buffers)
    assert not np.allclose(first[weights], dense[weights])  # the rest was compressed
    assert np.isfinite(topk).all()


@pytest.mark.parametrize("mode", [name for name in MODES if name.startswith("allreduce")])
def test_buffers_take_none_of_the_k_slots_of_the_shared_index_set(mode: str) -> None:
    """Every index set is k weights plus all buffers, whether the leader, the previous
    aggregate or the residual estimate picks it: the counters' deltas (1 a step) and the
    statistics' would otherwise crowd weights out at small c."""
    buffers = buffer_positions(build_model("mlp-bn", DIGITS_SPEC, seed=5))
    settings = federation_settings(model="mlp-bn", compression_ratio=0.002, **MODES[mode])
    for rounds in (1, 2):  # round 2 of the one-phase policies uses their own index set
        _, strategy, _, stats = run_in_process(settings, rounds=rounds)
        update = strategy.replicas.last_delta
        assert update is not None and not stats[rounds].refused
        assert np.isin(buffers, update.indices).all()
        assert update.indices.size == topk_count(update.size, 0.002) + buffers.size


def test_the_var_score_and_the_leader_indices_leave_the_buffers_out() -> None:
    """||TopK(e)||² (the VAR score) and the indices a leader sends are over the weights only."""

    from flwr.app import RecordDict

    from collectives.allreduce import Allreduce
    from collectives.base import ClientAction
    from tests.helpers import client_job
    from wire.codec import decode_indices
    from wire.phases import PhaseRequest

    size, ratio = 1000, 0.01
    buffers = np.arange(990, 1000, dtype=np.int64)
    update = np.linspace(-1.0, 1.0, size).astype(np.float32)
    update[buffers] = 100.0  # e.g. counters and running variances, far larger than any weight
    state = RecordDict()
    payload = Allreduce.client_train(client_job(state, update, ratio, whole=buffers))
    weights = np.delete(update, buffers).astype(np.float64)
    k = topk_count(size, ratio)
    assert payload.metrics[TOPK_NORM2] == pytest.approx(float(np.sum(np.sort(weights**2)[-k:])))
    action = ClientAction(state, PhaseRequest(1, ratio), RecordDict(), None, None)  # type: ignore[arg-type]
    sent = decode_indices(Allreduce.client_actions["indices"](action), size)
    assert sent.size == k and not np.isin(sent, buffers).any()


@pytest.mark.parametrize("mode", list(MODES))
def test_client_replicas_track_the_global_model_bit_for_bit(mode: str) -> None:
    final, strategy, grid, stats = run_in_process(
        federation_settings(compression_ratio=0.05, **MODES[mode]), rounds=4
    )

    # Each replica holds the model of the last instruction: the global before round 4's update.
    assert_replicas_hold_the_model_before_last(strategy, grid, final)
    # After round 1 only sparse updates travel down, far smaller than the model.
    full = stats[1].bytes_down
    assert stats[4].bytes_down < full / 3


def test_star_leader_rotates_by_round_and_partition() -> None:
    settings = federation_settings(compression_ratio=0.05, collective="allreduce")
    _, _, grid, _ = run_in_process(settings, rounds=6)
    leaders = [node - 100 for kind, node in grid.sent if kind == "train.indices"]
    assert leaders == [r % 3 for r in range(1, 7)]


def test_var_leader_has_the_largest_topk_energy(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = federation_settings(compression_ratio=0.05, collective="allreduce", leader="var")
    scores: dict[int, float] = {}
    choose = LEADERS["var"]

    def spy(server_round: int, participants: list[Participant]) -> Participant:
        scores.update({p.node_id: claim_of(p) for p in participants})
        return choose(server_round, participants)

    monkeypatch.setitem(LEADERS, "var", spy)
    _, strategy, grid, stats = run_in_process(settings, rounds=1)
    [leader] = [node for kind, node in grid.sent if kind == "train.indices"]
    assert len({node for kind, node in grid.sent if kind == "train.values"}) == 3
    assert stats[1].phases[1]["name"] == "indices"
    # The chosen leader's score is the largest among the reported ones.
    assert len(scores) == 3 and scores[leader] == max(scores.values())


def test_uplink_bytes_at_one_percent_match_the_encoding() -> None:
    settings = federation_settings(compression_ratio=0.01, collective="allgather")
    _, strategy, _, stats = run_in_process(settings, rounds=2)
    d = 50_826
    k = topk_count(d, 0.01)
    formula = 3 * (4 * k + index_nbytes(k, d))
    assert stats[2].bytes_up == pytest.approx(formula, rel=0.10)

    settings = federation_settings(compression_ratio=0.01, collective="allreduce")
    _, strategy, _, stats = run_in_process(settings, rounds=2)
    phases = {p["name"]: p for p in stats[2].phases}
    assert phases["values"]["bytes_up"] == pytest.approx(3 * 4 * k, rel=0.10)
    assert phases["indices"]["bytes_up"] == pytest.approx(index_nbytes(k, d), rel=0.10)
    assert stats[2].round_time_s == pytest.approx(sum(p["duration_s"] for p in phases.values()))


def test_a_node_that_drops_out_gets_the_full_model_when_it_returns() -> None:
    settings = federation_settings(compression_ratio=0.05, collective="allgather")
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    strategy = build_strategy(settings, unit_clock({i: DIGITS_PROFILE for i in range(3)}), layout)
    grid = InProcessGrid(settings)
    arrays = layout.unflatten(model_to_vector(model))
    config = ConfigRecord()
    payloads, rounds = [], {}
    for server_round in (1, 2, 3):
        grid.fail_nodes = {101} if server_round == 2 else set()
        messages = list(strategy.configure_train(server_round, arrays, config, grid))  # type: ignore[arg-type]
        payloads.append({m.metadata.dst_node_id: m.content["config"]["payload"] for m in messages})
        new, _ = strategy.aggregate_train(server_round, grid.send_and_receive(messages))
        assert new is not None
        arrays = new
        rounds[server_round] = last_round(strategy)
        assert rounds[server_round].num_clients == (2 if server_round == 2 else 3)
    assert rounds[1].failed == [] and rounds[3].failed == []
    assert rounds[2].failed == ["node 101 (partition 1): no reply before the round timeout"]
    assert rounds[3].model_payloads == {"delta": 2, "full": 1}
    assert payloads[0] == {100: "full", 101: "full", 102: "full"}
    assert payloads[1] == {100: "delta", 101: "delta", 102: "delta"}
    assert payloads[2] == {100: "delta", 101: "full", 102: "delta"}


@pytest.mark.parametrize("collective", ["dense", "allgather"])
def test_a_round_goes_to_every_connected_node_once_min_clients_are(collective: str) -> None:
    from tests.helpers import FakeGrid

    settings = federation_settings(collective=collective, num_clients=4, min_clients=2)
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    built = build_strategy(settings, unit_clock({i: DIGITS_PROFILE for i in range(4)}), layout)
    arrays = layout.unflatten(model_to_vector(model))
    for connected in ([100, 102], [100, 101, 103], [100, 101, 102, 103]):
        messages = built.configure_train(1, arrays, ConfigRecord(), FakeGrid(connected))
        assert sorted(m.metadata.dst_node_id for m in messages) == connected
