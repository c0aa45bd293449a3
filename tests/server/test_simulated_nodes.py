"""The ServerApp finds out at once when a simulation has another node count than num-clients
(under ``flwr run .`` it waited round-timeout-s, then failed), on Flower's own in-memory grid
with its nodes registered as the simulation registers them."""

from __future__ import annotations

import threading
import time
from typing import cast

import pytest
from flwr.proto.task_pb2 import Task
from flwr.server.superlink.fleet.vce.vce_api import _register_nodes
from flwr.server.superlink.linkstate import InMemoryLinkState, LinkStateFactory
from flwr.server.superlink.linkstate.in_memory_linkstate import RunRecord
from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME, NOOP_FEDERATION_ID
from flwr.supercore.object_store import ObjectStoreFactory
from flwr.supercore.run import Run
from flwr.superlink.federation import NoOpFederationManager
from flwr.superlink.grid import InMemoryGrid

from common.settings import ConfigError
from server.app import check_simulated_nodes

TIMEOUT_S = 60.0  # round-timeout-s: the check must not wait it out


def _simulation(nodes: int, after_s: float) -> InMemoryGrid:
    """The grid a simulation's ServerApp gets (as flwr.simulation's _main_loop makes it), and
    ``nodes`` registered ``after_s`` later, as the simulation engine does once it starts."""
    states = LinkStateFactory(FLWR_IN_MEMORY_DB_NAME, NoOpFederationManager(), ObjectStoreFactory())
    run = Run.create_empty(run_id=7)
    run.primary_task_id, run.federation_id = 11, NOOP_FEDERATION_ID
    state = cast(InMemoryLinkState, states.state())
    state.run_ids[run.run_id] = RunRecord(run=run)
    state.task_store[11] = Task(task_id=11, run_id=run.run_id)
    grid = InMemoryGrid(state_factory=states)
    grid.set_run(run)
    timer = threading.Timer(after_s, _register_nodes, (nodes, states))
    timer.start()
    return grid


def test_as_many_nodes_as_clients_pass_once_registered() -> None:
    grid = _simulation(5, after_s=0.3)
    check_simulated_nodes(grid, 5, TIMEOUT_S)
    assert len(list(grid.get_node_ids())) == 5  # it waited for them


@pytest.mark.parametrize("nodes", [3, 8])
def test_another_node_count_fails_at_once_naming_num_clients(nodes: int) -> None:
    grid = _simulation(nodes, after_s=0.2)
    start = time.monotonic()
    with pytest.raises(ConfigError, match=f"num-clients = 5 but this simulation has {nodes} nodes"):
        check_simulated_nodes(grid, 5, TIMEOUT_S)
    assert time.monotonic() - start < TIMEOUT_S  # found out, not timed out


def test_no_node_at_all_fails_after_the_timeout() -> None:
    with pytest.raises(ConfigError, match="has 0 nodes: set num-supernodes = 2"):
        check_simulated_nodes(_simulation(0, after_s=0.0), 2, timeout_s=0.3)
