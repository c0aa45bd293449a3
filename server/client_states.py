"""The clients' state at a checkpoint, where clients and server share a file system
(Flower's simulation, the in-process federation): exact resume for every strategy.

At a checkpoint round, before the server writes its own checkpoint, every connected node is
asked to write its ``context.state`` under ``client-state/round-R/`` of the results directory
(``client/saved_state.py``); once the server's checkpoint of round R is written, older rounds'
directories go. A resumed run asks each of its new nodes to read its partition's state back
before the first resumed round, and learns which node holds which partition from the answers:
the server then goes on as if the nodes had never changed (each keeps the replica the old one
had). A node whose partition has no saved state starts afresh and is sent the full model.
Neither query is part of a round: nothing of them is charged or recorded.
"""

from __future__ import annotations

import shutil
import time
from logging import INFO, WARNING
from pathlib import Path

from flwr.app import Message
from flwr.common import log
from flwr.serverapp import Grid

from strategies.edge import EdgeStrategy
from wire.keys import CLIENT_STATE_DIR, RESTORE_STATE, SAVE_STATE
from wire.queries import StateRequest, parse_state_reply


def round_directory(results_dir: Path, server_round: int) -> Path:
    return results_dir / CLIENT_STATE_DIR / f"round-{server_round}"


def _ask(grid: Grid, kind: str, request: StateRequest, timeout_s: float) -> list[Message]:
    content = request.to_content()
    messages = [  # a query that outlives the exchange is dropped, never answered late
        Message(content=content, message_type=kind, dst_node_id=node, ttl=timeout_s)
        for node in sorted(grid.get_node_ids())
    ]
    return list(grid.send_and_receive(messages, timeout=timeout_s))


def save_client_states(
    grid: Grid, results_dir: Path, server_round: int, num_clients: int, timeout_s: float
) -> int:
    """Ask every node to write its state for round ``server_round``; how many did."""
    began = time.perf_counter()
    directory = round_directory(results_dir, server_round)
    shutil.rmtree(directory, ignore_errors=True)  # no file of an earlier attempt stays
    request = StateRequest(server_round, str(directory))
    saved = 0
    for reply in _ask(grid, SAVE_STATE, request, timeout_s):
        try:
            if reply.has_error():
                raise ValueError(reply.error.reason)
            parse_state_reply(reply.content, num_clients)
            saved += 1
        except ValueError as exc:
            node = reply.metadata.src_node_id
            log(WARNING, "edgeflex: node %d did not save its state: %s", node, exc)
    written = sum(f.stat().st_size for f in directory.iterdir() if f.is_file())  # states only
    log(
        INFO,
        "edgeflex: round %d: %d clients saved their state (%.2f MB) in %.2f s",
        server_round,
        saved,
        written / 1e6,
        time.perf_counter() - began,
    )
    return saved


def keep_only(results_dir: Path, server_round: int) -> None:
    """Remove the client states of every checkpoint round but ``server_round``."""
    keep = round_directory(results_dir, server_round)
    for directory in (results_dir / CLIENT_STATE_DIR).glob("round-*"):
        if directory != keep:
            shutil.rmtree(directory, ignore_errors=True)


def restore_client_states(
    grid: Grid,
    strategy: EdgeStrategy,
    checkpoint_dir: Path,
    server_round: int,
    num_clients: int,
    timeout_s: float,
) -> set[int]:
    """Ask every node to take its partition's state of round ``server_round`` back; the
    strategy learns who holds what (``EdgeStrategy.take_over``). The nodes that did."""
    began = time.perf_counter()
    request = StateRequest(server_round, str(round_directory(checkpoint_dir, server_round)))
    connected = set(grid.get_node_ids())
    restored = set()
    for reply in _ask(grid, RESTORE_STATE, request, timeout_s):
        node = reply.metadata.src_node_id
        try:
            if reply.has_error():
                raise ValueError(reply.error.reason)
            partition, kept = parse_state_reply(reply.content, num_clients)
            strategy.take_over(node, partition, kept, connected)
        except ValueError as exc:
            log(WARNING, "edgeflex: node %d restored nothing: %s", node, exc)
            continue
        if kept:
            restored.add(node)
    log(
        INFO,
        "edgeflex: %d clients took their state of round %d back in %.2f s",
        len(restored),
        server_round,
        time.perf_counter() - began,
    )
    return restored
