"""Who takes part in a round: the connected nodes, or with client sampling the nodes of the
round's partitions (a node not yet identified is asked its partition first, an ``identify``
query), judged longest connected first (``by_seniority``)."""

from __future__ import annotations

from collections.abc import Collection
from logging import WARNING

from flwr.app import Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy.strategy_utils import sample_nodes

from strategies.identity import Identities
from strategies.sampling import ClientSampler
from wire.keys import IDENTIFY
from wire.queries import parse_identity


def by_seniority(replies: list[Message], identities: Identities) -> list[Message]:
    """Longest connected first: of several first claims of a partition, the senior one that
    passes every check binds it, and the others are then refused."""
    return sorted(replies, key=lambda m: identities.seniority(m.metadata.src_node_id))


def round_nodes(
    grid: Grid,
    server_round: int,
    min_nodes: int,
    identities: Identities,
    sampler: ClientSampler | None,
    *,
    num_clients: int,
    timeout_s: float,
) -> tuple[list[int], dict[str, object] | None, frozenset[int]]:
    """The round's nodes, once at least ``min_nodes`` are connected (one listing): every one,
    or with a sampler those of its partitions; what the record says of it; and every node
    connected (a partition's owner still holds it while it is not sampled)."""
    _, connected = sample_nodes(grid, min_nodes, min_nodes)
    identities.saw(connected, server_round)
    alive = frozenset(connected)  # looked up per node: a list (or a set per node) is O(N^2)
    if sampler is None:
        return sorted(connected), None, alive
    unknown = sorted(n for n in connected if n not in identities.partition_of)
    identified = (
        identify(grid, unknown, alive, identities, num_clients, timeout_s) if unknown else 0
    )
    owners = {p: n for n, p in identities.partition_of.items() if n in alive}
    partitions, nodes = sampler.nodes(server_round, owners)
    return nodes, {"partitions": partitions, "identified": identified}, alive


def identify(
    grid: Grid,
    nodes: list[int],
    connected: Collection[int],
    identities: Identities,
    num_clients: int,
    timeout_s: float,
) -> int:
    """Ask ``nodes`` their partition (an ``identify`` query); bind those that answer
    acceptably; return how many did. The rest are left out of sampling, with a warning."""
    messages = [
        Message(content=RecordDict(), message_type=IDENTIFY, dst_node_id=node) for node in nodes
    ]
    replies = list(grid.send_and_receive(messages, timeout=timeout_s))
    bound = 0
    for reply in by_seniority(replies, identities):
        node = reply.metadata.src_node_id
        try:
            if reply.has_error():
                raise ValueError(f"error reply: {reply.error.reason}")
            partition = parse_identity(reply.content, num_clients)
            identities.check(node, partition, connected)
        except ValueError as exc:
            log(WARNING, "node %d not sampled: its identify reply is refused: %s", node, exc)
            continue
        identities.bind(node, partition)
        bound += 1
    return bound
