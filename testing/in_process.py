"""An in-process federation: the real ClientApp handlers behind a Grid, no Flower runtime.

Every message is serialized and parsed as on the wire, so a client never shares objects with
the server. Used to drive ``Strategy.start`` through whole rounds in a unit test.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from torch.nn import Module

from client import app as client_app
from common.params import model_to_vector
from common.settings import Settings
from server import app as server_app
from strategies.edge import AfterRound, EdgeStrategy
from strategies.ledger import RoundStats
from wire.layout import Layout


def _wire_copy(content: RecordDict) -> RecordDict:
    return recorddict_from_proto(recorddict_to_proto(content))


class InProcessGrid:
    """Nodes ``first_node_id + partition id``, each with its own persistent ``Context``."""

    shares_files = True  # the clients write their state where the server reads it (resume)

    def __init__(
        self, settings: Settings, first_node_id: int = 100, app: ClientApp | None = None
    ) -> None:
        self.settings = settings
        self.app = client_app.app if app is None else app  # another: a problem of its own
        run_config = settings.to_run_config()
        self.contexts = {
            first_node_id + i: Context(
                run_id=1,
                node_id=first_node_id + i,
                node_config={"partition-id": i, "num-partitions": settings.run.num_clients},
                state=RecordDict(),
                run_config=dict(run_config),
            )
            for i in range(settings.run.num_clients)
        }
        self.sent: list[tuple[str, int]] = []  # (message type, destination) in send order
        self.fail_nodes: set[int] = set()
        self._waiting: dict[str, Message] = {}  # push/pull: replies not yet pulled

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Handle each message at once; its reply waits for ``pull_messages``."""
        ids = []
        for msg in messages:
            message_id = f"in-process-{len(self.sent)}"
            for reply in self.send_and_receive([msg]):
                reply.metadata.__dict__["_reply_to_message_id"] = message_id
                self._waiting[message_id] = reply
            ids.append(message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self._waiting.pop(i) for i in message_ids if i in self._waiting]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.sent.append((msg.metadata.message_type, node))
            if node in self.fail_nodes:
                continue  # a node that dropped out: no reply
            incoming = Message(content=_wire_copy(msg.content), metadata=msg.metadata)  # type: ignore[call-overload]
            reply = self.app(incoming, self.contexts[node])  # routed, with its mods
            replies.append(Message(content=_wire_copy(reply.content), metadata=reply.metadata))  # type: ignore[call-overload]
        return replies


def run_server_app(grid: InProcessGrid) -> None:
    """The real ServerApp (``server.app.main``) over ``grid``, for the grid's settings."""
    context = Context(
        run_id=1,
        node_id=0,
        node_config={},
        state=RecordDict(),
        run_config=grid.settings.to_run_config(),
    )
    server_app.main(grid, context)  # type: ignore[arg-type]


class Rounds(dict[int, RoundStats]):
    """Each round's figures as ``EdgeStrategy.start`` hands them to ``after_round``."""

    def __call__(self, stats: RoundStats, arrays: Any, metrics: Any, last: bool) -> None:
        self[stats.round] = stats


def train_in_process(
    strategy: EdgeStrategy,
    settings: Settings,
    model: Module,
    grid: InProcessGrid,
    rounds: int,
    after_round: AfterRound | None = None,
) -> ArrayRecord:
    """``rounds`` rounds of a built ``strategy`` over ``grid`` from ``model``'s weights (the
    strategy holds the run's local training); the final model."""
    layout = Layout.of_model(model)
    result = strategy.start(
        grid=grid,  # type: ignore[arg-type]
        initial_arrays=layout.unflatten(model_to_vector(model)),
        num_rounds=rounds,
        after_round=after_round,
    )
    arrays: ArrayRecord = result.arrays
    return arrays
