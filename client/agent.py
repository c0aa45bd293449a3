"""The edge agent: a device as one long-lived process, its Flower node and its ClientApp.

Flower 1.42 runs a node as a SuperNode that starts a fresh ``flwr-clientapp`` process per
message (2.0 s and 123 MB here before any of our code, 2.9 s with torch), or, in ``--isolation
process``, leaves each message to a SuperExec the operator runs. Either way a device holds two
long-lived processes. The agent is both: it holds the node's Fleet connection itself (Flower's
own ``http_request_response``, as ``flower-supernode`` uses it) and runs each message in this
warm process (torch imported, the live stream subscribed): pull the message and its objects,
call the ClientApp, push the reply and its objects, in the order Flower's SuperNode does.

Between messages it waits for a wake-up (``common.wake_ups``: the ServerApp names this node
on an MQTT topic after it pushed a message) and polls the SuperLink every ``--idle-poll-s``
otherwise.

State: a node's ``context.state`` (replica, error feedback, stream clock) lives in this
process. With ``--state-dir`` it is also written there after every reply (Flower's protobuf,
not a pickle), with the node's key, so a restarted agent is the same node (its key) with the
same state: it answers the next message as if it had not stopped. A live stream's buffered
samples die with the process; samples published while it is down wait at the broker (a
persistent MQTT session).

This module is the process: ``serve`` (the wait between messages) and the ``edgeflex-agent``
command. Its parts: ``client.fleet`` (the node on Flower's Fleet API, the only module with
Flower internals), ``client.device_state`` (what ``--state-dir`` keeps) and
``client.node_loop`` (a run's context, and each message through the ClientApp).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from client.device_state import DeviceState
from client.fleet import Link, connect, parse_node_config, set_node_heartbeat
from client.node_loop import Node
from common.accelerator import AUTO, DEVICES, resolve
from common.flower_patches import check_flower
from common.wake_ups import FALLBACK_POLL_S, WakeUps, node_topic, run_topic
from wire.keys import NODE_PARTITION_ID
from wire.stream_samples import DEFAULT_TOPIC_PREFIX, BrokerAuth, parse_broker

log = logging.getLogger("edgeflex.agent")


def serve(
    node: Node,
    stop: threading.Event,
    wake_ups: WakeUps | None = None,
    idle_poll_s: float = FALLBACK_POLL_S,
) -> int:
    """Take this node's messages until ``stop`` is set; return how many were handled.
    Between messages: until a wake-up, or ``idle_poll_s``."""
    if wake_ups is not None:
        wake_ups.listen(node_topic(node.connection.node_id))

    def wait() -> None:  # ends early on a wake-up, or on stop
        if wake_ups is None:
            stop.wait(idle_poll_s)
        elif not stop.is_set():
            wake_ups.wait(idle_poll_s)

    handled = 0
    while not stop.is_set():
        if wake_ups is not None:
            wake_ups.woken.clear()  # before the poll: a wake-up during it is not lost
        pulled = node.connection.receive()
        if pulled is None:
            wait()
            continue
        node.handle(*pulled)
        handled += 1
        if wake_ups is not None:
            wake_ups.wake(run_topic(pulled[0].metadata.run_id))
            # The next message comes with a wake-up (perhaps already while this one ran):
            # no empty poll in between.
            wait()
    return handled


def warm_up() -> None:
    """Pay a fresh process's one-off cost while it waits for its first message, not in it:
    torch's first backward pass (1.6 s). (The data libraries are a child's: see
    ``client.node_loop.Node.make_local_data``.)"""
    began = time.monotonic()
    import torch

    layer = torch.nn.Linear(4, 2)
    layer(torch.zeros(1, 4)).sum().backward()
    log.info("warmed up in %.1f s (first backward pass)", time.monotonic() - began)


def _link(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Link:
    if args.insecure == (args.root_certificates is not None):
        parser.error("give --root-certificates (TLS) or --insecure")
    root = None if args.root_certificates is None else args.root_certificates.read_bytes()
    keys = None
    if args.auth_supernode_private_key is not None:
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_ssh_private_key

        try:
            private = load_ssh_private_key(args.auth_supernode_private_key.read_bytes(), None)
        except (OSError, ValueError) as exc:
            parser.error(f"--auth-supernode-private-key: {exc}")
        if not isinstance(private, ec.EllipticCurvePrivateKey):
            parser.error("--auth-supernode-private-key: not an elliptic-curve key")
        keys = (private, private.public_key())
    return Link(args.superlink, root, keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="edgeflex-agent", description=__doc__.split("\n", 1)[0].strip()
    )
    parser.add_argument("--superlink", default="127.0.0.1:9092", help="the Fleet API")
    parser.add_argument("--insecure", action="store_true", help="no TLS (loopback only)")
    parser.add_argument("--root-certificates", type=Path, help="the SuperLink's CA (TLS)")
    parser.add_argument(
        "--auth-supernode-private-key",
        type=Path,
        help="the node's key registered with `flwr supernode register` (OpenSSH format)",
    )
    parser.add_argument("--node-config", default="", help="'partition-id=0 num-partitions=3'")
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="keep the node's key, id and state here, so a restart is the same node",
    )
    parser.add_argument(
        "--heartbeat-interval-s",
        type=float,
        help="what the node tells the SuperLink (Flower's 30 s; at least 10); the SuperLink "
        "drops a node silent for twice that",
    )
    parser.add_argument(
        "--idle-poll-s",
        type=float,
        default=FALLBACK_POLL_S,
        help="poll the SuperLink this often when no wake-up comes",
    )
    parser.add_argument(
        "--wake-broker", metavar="HOST:PORT", help="MQTT broker of the run's wake-ups"
    )
    parser.add_argument(
        "--mqtt",
        metavar="HOST:PORT",
        help="train on samples from this MQTT broker (the topic of --node-config's "
        "partition-id) instead of replaying its partition",
    )
    parser.add_argument(
        "--device",
        default=AUTO,
        help="where this device trains, in every run (the run config's device is for "
        f"simulated clients): {', '.join(DEVICES)}; auto: CUDA, then MPS, else the CPU",
    )
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    parser.add_argument("--mqtt-tls-ca", type=Path, help="CA certificate: MQTT over TLS")
    parser.add_argument("--mqtt-username", help="for a broker with a password file")
    parser.add_argument("--mqtt-password-file", type=Path, help="first line: the password")
    args = parser.parse_args(argv)
    link = _link(args, parser)
    broker = wake_broker = None
    auth = BrokerAuth()
    try:
        auth = BrokerAuth.of(args.mqtt_tls_ca, args.mqtt_username, args.mqtt_password_file)
        node_config = parse_node_config(args.node_config)
        if args.mqtt is not None:
            broker = parse_broker(args.mqtt)
        if args.wake_broker is not None:
            wake_broker = parse_broker(args.wake_broker)
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    if args.node_config.strip() and not node_config:
        parser.error(f"--node-config {args.node_config!r} is not 'key=value ...'")
    # The partition is named once, in --node-config (a systemd unit: its instance name).
    partition_id = node_config.get(NODE_PARTITION_ID)
    if broker is not None and (
        not isinstance(partition_id, int) or isinstance(partition_id, bool) or partition_id < 0
    ):
        parser.error(
            f"--mqtt needs {NODE_PARTITION_ID}=N (N >= 0) in --node-config: it names the "
            "node's topic"
        )
    if not 0.01 <= args.idle_poll_s <= 60:
        parser.error(f"--idle-poll-s must be within [0.01, 60] s, got {args.idle_poll_s}")
    if args.heartbeat_interval_s is not None:
        try:  # what the node announces, and how often it beats
            set_node_heartbeat(args.heartbeat_interval_s)
        except ValueError as exc:
            parser.error(str(exc))
    try:  # this machine is the one that trains: its hardware is checked here, at start
        training_on = resolve(args.device, key="--device")
    except ValueError as exc:
        parser.error(str(exc))
    try:  # after the arguments: their own mistakes are named first
        check_flower(  # the node loop follows flwr 1.42's SuperNode and calls its connection
            what="edgeflex-agent follows",
            advice="run Flower's SuperNodes (flower-supernode) on this Flower",
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.state_dir is not None:
        args.state_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per poll
    from client.app import make_app  # torch and the model: imported once, here

    # Beside the connection, not before it: a restarted agent takes its next message at once.
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    live, subscriber = None, None
    if broker is not None:
        from client.live_stream import LiveStream, subscribe

        assert isinstance(partition_id, int)  # checked with the arguments
        live = LiveStream(partition_id)
        subscriber = subscribe(live, broker, args.topic_prefix, auth)
        log.info("streaming %s/node-%d from %s", args.topic_prefix, partition_id, broker)
    wake_ups = None if wake_broker is None else WakeUps(wake_broker, auth)
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if wake_ups is not None:
            wake_ups.woken.set()  # an idle wait ends now
        if live is not None:
            live.interrupt()  # a message waiting for samples ends now

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    handled = 0
    try:
        device = DeviceState(args.state_dir)
        with connect(link, device) as connection:
            log.info("node %d on the SuperLink at %s", connection.node_id, link.superlink)
            log.info("training on %s (--device %s)", training_on, args.device)
            app = make_app(live, shared_files=False, device=args.device)
            node = Node(connection, app, node_config, device)
            handled = serve(node, stop, wake_ups, args.idle_poll_s)
    finally:
        if wake_ups is not None:
            wake_ups.close()
        if subscriber is not None:
            subscriber.disconnect()  # the broker keeps the session for the next start
            subscriber.loop_stop()
    log.info("stopped after %d messages", handled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
