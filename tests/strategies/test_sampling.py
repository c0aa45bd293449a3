"""clients-per-round: seeded sampling over partitions, identify queries, records, residuals."""

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import MetricRecord, RecordDict

from client.replica import REPLICA_KEY
from commands.run_config import parse_overrides, resolve_settings
from compress.error_feedback import RESIDUAL_KEY
from server.records import read_rounds, without_wall_clock
from state.vectors import load_vector
from strategies.sampling import ClientSampler
from testing.in_process import InProcessGrid, run_server_app
from wire.keys import METRICS_KEY, PARTITION_ID
from wire.queries import parse_identity

pytestmark = pytest.mark.usefixtures("task_identity")

RUN = (
    "num-clients=6 clients-per-round=2 num-server-rounds=5 seed=8 collective=allgather "
    "collective=allgather compression-ratio=0.1"
)


class ResidualWatch(InProcessGrid):
    """Notes every node's error-feedback residual after each exchange (the strategy's grid
    wrapper pushes each exchange's messages together)."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings, first_node_id=100)
        self.residuals: list[dict[int, np.ndarray | None]] = []

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        replies = super().push_messages(messages)  # handled at once, in process
        self.residuals.append(
            {
                node - 100: load_vector(ctx.state, RESIDUAL_KEY)
                for node, ctx in self.contexts.items()
            }
        )
        return replies


def _run(tmp: Path, text: str = RUN, first_node_id: int = 100) -> list[dict[str, Any]]:
    settings = resolve_settings(parse_overrides(text) | {"results-dir": str(tmp)})
    run_server_app(InProcessGrid(settings, first_node_id))
    return [without_wall_clock(r) for r in read_rounds(tmp)]


def test_the_seed_picks_the_partitions_whatever_the_node_ids(tmp_path: Path) -> None:
    rows = _run(tmp_path / "a")
    sampler = ClientSampler(2, seed=8)
    assert [r["sampling"]["partitions"] for r in rows] == [
        sampler.partitions(r["round"], list(range(6))) for r in rows
    ]
    assert [r["num_clients"] for r in rows] == [2] * 5
    # Every node was asked its partition once, before round 1.
    assert [r["sampling"]["identified"] for r in rows] == [6, 0, 0, 0, 0]
    # Other node ids (a new simulation draws new ones): the same records.
    assert _run(tmp_path / "b", first_node_id=900) == rows
    # Not every round the same pair.
    assert len({tuple(r["sampling"]["partitions"]) for r in rows}) > 1


def test_without_sampling_the_records_have_no_sampling_field(tmp_path: Path) -> None:
    rows = _run(tmp_path / "all", RUN.replace("clients-per-round=2", "clients-per-round=0"))
    assert all("sampling" not in r and r["num_clients"] == 6 for r in rows)


def test_unsampled_clients_keep_their_residuals(tmp_path: Path) -> None:
    settings = resolve_settings(parse_overrides(RUN) | {"results-dir": str(tmp_path)})
    grid = ResidualWatch(settings)
    run_server_app(grid)
    rows = read_rounds(tmp_path)
    trained = [set(r["sampling"]["partitions"]) for r in rows]
    rounds = grid.residuals[1:]  # the first exchange is the identify query
    for i in range(1, len(rounds)):
        for partition, residual in rounds[i].items():
            before = rounds[i - 1][partition]
            if partition not in trained[i]:  # sat this round out: residual as it was
                assert (residual is None and before is None) or np.array_equal(residual, before)
            else:
                assert residual is not None and not np.array_equal(residual, before)
    # A client back after sitting out rounds gets a patch (what changed since its version).
    assert sum(r["model_payloads"].get("patch", 0) for r in rows) >= 1


class ReplicaWatch(InProcessGrid):
    """Notes the replica of every node after each exchange."""

    def __init__(self, settings: Any) -> None:
        super().__init__(settings, first_node_id=100)
        self.replicas: list[dict[int, np.ndarray | None]] = []

    def push_messages(self, messages):  # type: ignore[no-untyped-def]
        replies = super().push_messages(messages)
        self.replicas.append(
            {node - 100: load_vector(ctx.state, REPLICA_KEY) for node, ctx in self.contexts.items()}
        )
        return replies


def test_returning_clients_train_on_exactly_the_global_model(tmp_path: Path) -> None:
    settings = resolve_settings(parse_overrides(RUN) | {"results-dir": str(tmp_path)})
    grid = ReplicaWatch(settings)
    run_server_app(grid)
    rows = read_rounds(tmp_path)
    assert sum(r["model_payloads"].get("patch", 0) for r in rows) >= 2
    for row, replicas in zip(rows, grid.replicas[1:], strict=True):
        first, *others = (replicas[p] for p in row["sampling"]["partitions"])
        assert first is not None
        assert all(np.array_equal(first, other) for other in others)


def test_an_identify_reply_is_checked() -> None:
    def reply(value: object) -> RecordDict:
        return RecordDict({METRICS_KEY: MetricRecord({PARTITION_ID: value})})  # type: ignore[dict-item]

    assert parse_identity(reply(3), num_clients=6) == 3
    with pytest.raises(ValueError, match="partition-id 6 is not in 0..5"):
        parse_identity(reply(6), num_clients=6)
    with pytest.raises(ValueError, match="partition-id 2.0 is not an integer"):
        parse_identity(reply(2.0), num_clients=6)
    with pytest.raises(ValueError, match="missing MetricRecord"):
        parse_identity(RecordDict(), num_clients=6)


def test_a_sampler_draws_within_the_available_partitions() -> None:
    sampler = ClientSampler(3, seed=1)
    assert sampler.partitions(1, [4, 9]) == [4, 9]  # fewer than asked: all of them
    picked = sampler.partitions(2, list(range(100)))
    assert len(set(picked)) == 3 and picked == sorted(picked)
    assert picked == ClientSampler(3, seed=1).partitions(2, list(range(100)))
    assert picked != ClientSampler(3, seed=2).partitions(2, list(range(100)))
    with pytest.raises(ValueError, match="clients-per-round"):
        ClientSampler(0, seed=1)
