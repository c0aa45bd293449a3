"""This device's node on Flower's Fleet API, as Flower 1.42's SuperNode is: the edge agent's one
module that imports Flower internals (no public Flower API connects a node).

It connects as the device's node (taking back the identity a killed run of the device left
online), pulls a message's objects and pushes a reply's in the order the SuperNode does, and
reads a run's config and a node's config as the SuperNode reads them.
"""

# Flower internals used here (flwr 1.42.x only: the agent calls check_flower first), and why:
# - flwr.supernode.fleet_http_connection: http_request_response, the SuperNode's own Fleet
#   calls for one node; with flwr.supercore.heartbeat, the heartbeat interval it announces.
# - flwr.supernode.fleet_http_client, flwr.supernode.node_auth_http_interceptor,
#   flwr.supercore.interceptors.http.runtime_version, flwr.proto.fleet_pb2: register the
#   device's key and deactivate its last node, before the connection activates one.
# - flwr.supercore.primitives.asymmetric: a key made, and sent, as the SuperNode's.
# - flwr.supercore.inflatable: a message's object tree, pulled and pushed object by object.
# - flwr.supercore.run, flwr.supercore.fab, flwr.proto.message_pb2: what the Fleet calls
#   return (Run, Fab, ObjectTree), and RunNotRunningException, raised once a run has ended.
# - flwr.common.config: a run's config fused from its app bundle, and --node-config parsed.
# - flwr.common.constant: ErrorCode, the codes of an error reply.

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import click
from flwr.app import Message, UserConfig
from flwr.common.config import get_fused_config_from_fab, parse_config_args
from flwr.common.constant import ErrorCode
from flwr.proto.fleet_pb2 import DeactivateNodeRequest, RegisterNodeFleetRequest
from flwr.proto.message_pb2 import ObjectTree  # type: ignore[attr-defined]
from flwr.supercore import heartbeat as flower_heartbeat
from flwr.supercore.fab import Fab
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
    get_object_tree,
    no_object_id_recompute,
)
from flwr.supercore.inflatable.inflatable_utils import (
    pull_and_inflate_object_from_tree,
    push_objects,
)
from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes
from flwr.supercore.run import Run, RunNotRunningException
from flwr.supernode import fleet_http_connection
from flwr.supernode.fleet_http_client import FleetHttpClient
from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

from common.flower_patches import PULL_BACKOFF_CAP_S, PULL_BACKOFF_S, set_heartbeat

__all__ = [
    "Connection",
    "ErrorCode",
    "Keys",
    "Link",
    "NodeIdentity",
    "ObjectTree",
    "Run",
    "RunNotRunningException",
    "connect",
    "new_keys",
    "parse_node_config",
    "pull_message",
    "push_message",
    "fused_run_config",
    "set_node_heartbeat",
]

Keys = tuple[Any, Any]  # (EllipticCurvePrivateKey, EllipticCurvePublicKey)


@dataclass(frozen=True)
class Link:
    """Where the SuperLink's Fleet API is and how to reach it."""

    superlink: str  # host:port
    root_certificates: bytes | None = None  # None: --insecure
    keys: Keys | None = None  # the node's registered key (SuperNode authentication)


@dataclass
class Connection:
    """Flower's Fleet calls for one node (``http_request_response``'s tuple, named)."""

    node_id: int
    receive: Callable[[], tuple[Message, ObjectTree] | None]
    send: Callable[[Message, ObjectTree, float], tuple[set[str], str]]
    get_run: Callable[[int], Run]
    get_fab: Callable[[str, int], Fab]
    pull_object: Callable[[int, str], bytes]
    push_object: Callable[[int, str, str, bytes], None]
    confirm_message_received: Callable[[int, str], None]


class NodeIdentity(Protocol):
    """What a device keeps so that a restart is the same node (``client.device_state``)."""

    def own_keys(self) -> Keys | None: ...

    def last_node_id(self) -> int | None: ...

    def note_node_id(self, node_id: int) -> None: ...


def new_keys() -> Keys:
    """A key pair of the kind Flower's SuperNode makes and the SuperLink accepts."""
    return generate_key_pairs()


def _take_back_identity(link: Link, keys: Keys, self_registered: bool, last: int | None) -> None:
    """Before activating: register the device's own key (once; a repeat is refused and
    ignored), and deactivate the node a killed run of this device left online, whose key it
    holds: the SuperLink activates only an offline node, and would keep the dead one online
    for twice its heartbeat interval."""
    client = FleetHttpClient.from_server_address(
        link.superlink,
        link.root_certificates is None,
        link.root_certificates,
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name="SuperNode"),
            NodeAuthHttpInterceptor(*keys),
        ],
    )
    with client:
        if self_registered:
            # a repeat is refused: this device's earlier start registered the key
            with contextlib.suppress(Exception):
                client.RegisterNode(
                    RegisterNodeFleetRequest(public_key=public_key_to_bytes(keys[1]))
                )
        if last is not None:  # refused when it is offline already
            with contextlib.suppress(Exception):
                client.DeactivateNode(DeactivateNodeRequest(node_id=last))


@contextmanager
def connect(link: Link, device: NodeIdentity) -> Iterator[Connection]:
    """Flower's Fleet connection as this device's node: its registered key, or its own."""
    keys = link.keys
    self_registered = keys is None
    if keys is None:
        keys = device.own_keys()
    if keys is not None:
        _take_back_identity(link, keys, self_registered, device.last_node_id())
    with fleet_http_connection.http_request_response(
        link.superlink, link.root_certificates is None, link.root_certificates, keys
    ) as calls:
        connection = Connection(*calls)
        device.note_node_id(connection.node_id)
        yield connection


def pull_message(connection: Connection, message: Message, tree: ObjectTree) -> Message:
    """The message's objects, with a short pull back-off: a message is visible before all its
    objects are, and Flower's first back-off (1 s) is longer than a round here."""
    run_id = message.metadata.run_id
    expires = message.metadata.created_at + message.metadata.ttl  # no use after that
    pulled = pull_and_inflate_object_from_tree(
        tree,
        lambda object_id: connection.pull_object(run_id, object_id),
        lambda object_id: connection.confirm_message_received(run_id, object_id),
        return_type=Message,
        initial_backoff=PULL_BACKOFF_S,
        backoff_cap=PULL_BACKOFF_CAP_S,
        max_time=max(1.0, expires - time.time()),
    )
    pulled.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's own sets it
    return pulled


def push_message(connection: Connection, reply: Message, took_s: float) -> None:
    """The reply, then each object the SuperLink does not hold yet."""
    run_id = reply.metadata.run_id
    with no_object_id_recompute():
        reply.metadata.__dict__["_message_id"] = reply.object_id  # as Flower's own sets it
        tree = get_object_tree(reply)
        wanted, session = connection.send(reply, tree, took_s)
        push_objects(
            get_all_nested_objects(reply),
            lambda object_id, content: connection.push_object(run_id, session, object_id, content),
            object_ids_to_push=wanted,
        )


def fused_run_config(fab: Fab, run: Run) -> UserConfig:
    """The run's config: its app bundle's, with the run's overrides."""
    return get_fused_config_from_fab(fab.content, run)


def parse_node_config(text: str) -> UserConfig:
    """``--node-config`` ('key=value ...'), parsed as ``flower-supernode`` parses it; a key given
    twice (a systemd unit's ``partition-id=%i`` and an environment file's) is a ValueError."""
    keys = [pair.split("=", 1)[0] for pair in text.split() if "=" in pair]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"--node-config names {', '.join(twice)} more than once: {text!r}")
    try:
        return parse_config_args([text] if text else None)
    except click.ClickException as exc:  # Flower's words for a value TOML cannot read
        raise ValueError(f"--node-config {text!r}: {exc.message}") from exc


def set_node_heartbeat(interval_s: float) -> None:
    """What the node announces to the SuperLink, and how often it beats (ValueError outside
    Flower's bounds)."""
    set_heartbeat(fleet_http_connection, flower_heartbeat, interval_s=interval_s)
