"""Test helpers: Flower messages without a running federation, a fake grid, process checks."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import psutil
from flwr.app import Error, Message, Metadata, RecordDict

from testing.in_process import InProcessGrid
from timing.clock import VirtualClock
from timing.devices import DeviceProfile
from timing.network import NetworkSchedule

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
    from server.app import build_strategy

    return build_strategy(settings_with(**overrides), clock, layout)


def train_config(**overrides: Any) -> Any:
    """``Strategy.start``'s per-round config as the ServerApp makes it."""
    from server.build import train_config_record

    values = {"learning_rate": 0.5, "local_steps": 1, "batch_size": 32, "seed": 0} | overrides
    return train_config_record(**values)


def train_reply(
    partition_id: int, num_examples: int, train_loss: float = 1.0, **payload: Any
) -> RecordDict:
    """A training reply's content as a client makes it."""
    from wire.messages import TrainReply

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
    from compress.base import load_vector

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
