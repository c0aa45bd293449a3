"""Test helpers shared by test modules: Flower messages without a running federation, a fake
grid, in-process federations on digits and on a two-array model, a collective's client job,
and waits and checks for local federations' processes."""

from __future__ import annotations

import ast
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, Metadata, RecordDict

from collectives.base import ClientJob
from commands.run import FLWR_DIR
from common.data import DIGITS_SPEC
from common.models import build_model
from common.params import buffer_positions
from common.settings import Settings, settings_with
from compress import ENCODINGS, SELECTORS
from server import build as server_build
from server.build import build_strategy
from strategies.edge import EdgeStrategy
from strategies.ledger import RoundStats
from testing.in_process import (  # Rounds: re-exported for the tests
    InProcessGrid,
    Rounds,
    run_server_app,
    train_in_process,
)
from timing.clock import VirtualClock
from timing.devices import DeviceProfile
from timing.network import TRACE_COLUMNS, NetworkSchedule
from wire.layout import Layout
from wire.train_instruction import CompressionConfig, RoundConfig, TrainInstruction

# What the foundation issue asks every line of rounds.jsonl to carry.
REQUIRED_ROUND_FIELDS = {
    "round",
    "virtual_time_s",
    "wall_time_s",
    "accuracy",
    "loss",
    "bytes_up",
    "bytes_down",
    "compression_ratio",
    "collective",
    "num_clients",
}


def reply_message(
    content: RecordDict | None, src_node_id: int, error: str | None = None
) -> Message:
    """A reply as the grid hands it to ``aggregate_train``."""
    metadata = Metadata(
        run_id=1,
        message_id="",
        src_node_id=src_node_id,
        dst_node_id=1,
        reply_to_message_id="instruction",
        group_id="1",
        created_at=time.time(),
        ttl=60.0,
        message_type="train",
    )
    if error is not None:
        return Message(error=Error(code=0, reason=error), metadata=metadata)
    assert content is not None
    return Message(content=content, metadata=metadata)


class FakeGrid:
    """The part of a Grid that FedAvg.configure_train uses."""

    def __init__(self, node_ids: Iterable[int]) -> None:
        self._node_ids = list(node_ids)

    def get_node_ids(self) -> list[int]:
        return list(self._node_ids)


def processes_with_env(name: str, value_prefix: str) -> list[int]:
    """PIDs of live processes whose environment has ``name`` starting with ``value_prefix``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            value = proc.environ().get(name)
        except psutil.Error:
            continue
        if value is not None and value.startswith(value_prefix):
            found.append(proc.pid)
    return found


def make_strategy(clock: Any, layout: Any, **overrides: Any) -> Any:
    """The ServerApp's strategy for ``settings_with(**overrides)`` on a given clock and layout."""
    from common.settings import settings_with
    from server.build import build_strategy

    return build_strategy(settings_with(**overrides), clock, layout)


def last_round(strategy: EdgeStrategy) -> RoundStats:
    """The figures of the round ``aggregate_train`` just finished."""
    assert strategy.current is not None and strategy.current.stats is not None
    return strategy.current.stats


def train_reply(
    partition_id: int, num_examples: int, train_loss: float = 1.0, **payload: Any
) -> RecordDict:
    """A training reply's content as a client makes it."""
    from wire.train_reply import TrainReply

    return TrainReply(partition_id, num_examples, train_loss, **payload).to_content()


def unit_clock(
    profiles: Mapping[int, DeviceProfile], schedule: NetworkSchedule | None = None
) -> VirtualClock:
    """A virtual clock for a model of one training FLOP per sample: a device's FLOP/s reads
    as samples per second."""
    return VirtualClock(profiles, schedule, flops_per_sample=1.0)


def assert_replicas_hold_the_model_before_last(strategy: Any, grid: Any, final: Any) -> None:
    """Every client's replica is the global model the last round started from: ``final`` less
    the last step the replicas were sent."""
    import numpy as np

    from client.replica import REPLICA_KEY
    from state.vectors import load_vector

    delta = strategy.replicas.last_delta
    assert delta is not None
    before_last = final.copy()
    before_last[delta.indices] -= delta.values
    for context in grid.contexts.values():
        replica = load_vector(context.state, REPLICA_KEY)
        assert replica is not None
        np.testing.assert_allclose(replica, before_last, atol=1e-6)


class RewriteRound(InProcessGrid):
    """The in-process federation with ``rewrite`` applied to every reply of training round
    ``server_round`` (all of them: colluders, or a round nobody is accepted in)."""

    def __init__(self, settings: Any, server_round: int, rewrite: Any) -> None:
        super().__init__(settings)
        self.target, self.rewrite, self.round = server_round, rewrite, 0

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        messages = list(messages)
        if messages and messages[0].metadata.message_type == "train":
            self.round += 1
        replies = super().send_and_receive(messages, timeout=timeout)
        if self.round == self.target:
            for reply in replies:
                self.rewrite(reply.content)
        return replies


# --- in-process federations on digits (the MLP) ----------------------------------------------

DIGITS_PROFILE = DeviceProfile("p", 1000.0, 0.0, 1e6, 2e6, 0.01)


def federation_settings(**overrides: object) -> Settings:
    """3 clients, batches of 16, lr 0.3, seed 5, and ``overrides``."""
    base = {"num_clients": 3, "batch_size": 16, "learning_rate": 0.3, "seed": 5}
    return settings_with(**(base | overrides))


def run_in_process(
    settings: Settings, rounds: int, grid: InProcessGrid | None = None
) -> tuple[np.ndarray, EdgeStrategy, InProcessGrid, Rounds]:
    """``rounds`` rounds of the real strategy and ClientApps in process: the final model, the
    strategy, the grid and each round's figures."""
    model = build_model(settings.training.model, DIGITS_SPEC, seed=settings.run.seed)
    layout = Layout.of_model(model)
    clock = unit_clock({i: DIGITS_PROFILE for i in range(settings.run.num_clients)})
    strategy = build_strategy(settings, clock, layout, buffer_positions(model))
    grid = grid or InProcessGrid(settings)
    seen = Rounds()
    arrays = train_in_process(strategy, settings, model, grid, rounds, after_round=seen)
    return layout.flatten(arrays), strategy, grid, seen


# --- where the code reaches inside Flower ----------------------------------------------------

# Flower's internals are changed in this module only (tests/test_shape.py); its writes are the
# patches, listed in its PATCHES (tests/test_flower_boundary.py).
PATCHES_MODULE = "common/flower_patches.py"


def names_imported_from(tree: ast.AST, source: Callable[[str], bool]) -> set[str]:
    """The names ``tree``'s ``from M import ...`` statements bind (an alias: its ``as`` name),
    for every module M that ``source`` accepts."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and source(node.module)
        for alias in node.names
    }


def run_server_app_spying_build(settings: Settings) -> list[tuple[tuple[Any, ...], EdgeStrategy]]:
    """The real ServerApp over an in-process grid for ``settings``, with each call it made to
    ``server.build.build_strategy``: the arguments (``build_strategy(*args)`` builds that
    strategy afresh) and the strategy built."""
    built: list[tuple[tuple[Any, ...], EdgeStrategy]] = []

    def spy(*args: Any) -> EdgeStrategy:
        strategy = build_strategy(*args)
        built.append((args, strategy))
        return strategy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(server_build, "build_strategy", spy)
        run_server_app(InProcessGrid(settings))
    return built


# --- a two-array model, replies made by hand -------------------------------------------------

TINY_SHAPES = {"w": (4, 3), "b": (3,)}
TINY_PROFILE = DeviceProfile("p", 100.0, 0.0, 1e6, 1e6, 0.01)


def tiny_record(rng: np.random.Generator, scale: float = 1.0) -> ArrayRecord:
    return ArrayRecord(
        {
            k: Array((rng.standard_normal(s) * scale).astype(np.float32))
            for k, s in TINY_SHAPES.items()
        }
    )


def tiny_strategy(n: int) -> EdgeStrategy:
    layout = Layout(tuple(TINY_SHAPES), tuple(TINY_SHAPES.values()))
    strategy: EdgeStrategy = make_strategy(  # batches of up to 64: the replies claim 51
        unit_clock({i: TINY_PROFILE for i in range(n)}), layout, num_clients=n, batch_size=64
    )
    return strategy


def start_round(strategy: EdgeStrategy, global_arrays: ArrayRecord, n: int) -> None:
    messages = list(
        strategy.configure_train(1, global_arrays, ConfigRecord(), FakeGrid(range(100, 100 + n)))
    )
    assert len(messages) == n


# --- a collective's client half, given a job by hand -----------------------------------------

JOB_ROUND = RoundConfig(1, 0.1, 1, 8, 0, 0.0)


def client_job(
    state: RecordDict,
    update: np.ndarray,
    ratio: float,
    selector: str = "topk",
    encoding: str = "float32",
    **fields: Any,
) -> ClientJob:
    """What a collective's client half gets after local training (a one-array model)."""
    return ClientJob(
        state=state,
        update=update,
        instruction=TrainInstruction(JOB_ROUND, compression=CompressionConfig(ratio, "allgather")),
        layout=Layout(("v",), ((update.size,),)),
        selector=SELECTORS[selector],
        encoding=ENCODINGS[encoding].from_settings(settings_with().compression),
        rng=np.random.default_rng(0),
        **fields,
    )


# --- local federations: processes ------------------------------------------------------------

FEDERATION_TIMEOUT_S = 400


def nothing_left() -> bool:
    """No process of this test process's local federations is left."""
    return processes_with_env("FLWR_HOME", str(FLWR_DIR / f"federation-{os.getpid()}-")) == []


def wait_for_rounds(path: Path, count: int, runner: threading.Thread) -> None:
    """Until ``path`` (a rounds.jsonl) has ``count`` rounds; fails past the timeout or when the
    run's thread ended first."""
    deadline = time.monotonic() + FEDERATION_TIMEOUT_S
    while not (path.exists() and len(path.read_text().splitlines()) >= count):
        assert time.monotonic() < deadline and runner.is_alive(), f"round {count} never finished"
        time.sleep(0.2)


def trace_line(*values: object) -> str:
    """One line of a JSON Lines trace: round, client, latency_ms, uplink_mbps, downlink_mbps."""
    return json.dumps(dict(zip(TRACE_COLUMNS, values, strict=True))) + "\n"
