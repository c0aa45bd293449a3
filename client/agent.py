"""The edge agent: one long-running process per device that runs its SuperNode's ClientApp
messages in place of the process Flower would start for each.

Flower 1.42 starts a fresh ``flwr-clientapp`` process per message; that process alone (Python
and Flower, before any of our code) takes 2.0 s and 123 MB here, and with torch 2.9 s. With
``flower-supernode --isolation process`` the SuperNode leaves its tasks to a SuperExec the
operator runs. The agent is that SuperExec for its own node, except that it runs each task in
its own warm process (torch imported, the live stream subscribed) instead of starting one:
acquire the task from the SuperNode's Runtime API, pull the message and the node's context,
call the same ClientApp simulation calls, push the reply and the context back. The Runtime
calls are Flower's own (``flwr.supernode.runtime.run_clientapp``), so the SuperNode cannot
tell the agent from its own ClientApp process.

State: ``context.state`` (replica, error feedback, stream clock) is kept by the SuperNode and
comes with every task, so an agent restart loses none of it. A live stream's buffered samples
live in the agent's memory and die with it; samples published while it is down wait at the
broker (a persistent MQTT session).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import FrameType

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode, SubStatus
from flwr.common.serde import context_from_proto, run_from_proto
from flwr.proto.node_pb2 import Node
from flwr.proto.runtime_pb2 import (
    AcquireTaskRequest,
    PullAppMessagesRequest,
    PullTaskInputRequest,
    SendTaskHeartbeatRequest,
)
from flwr.supercore import heartbeat as flower_heartbeat
from flwr.supercore.auth.superexec_secret import load_superexec_auth_secret
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender
from flwr.supercore.inflatable.inflatable_protobuf_utils import (
    make_confirm_message_received_fn_protobuf,
    make_pull_object_fn_protobuf,
)
from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SuperExecAuthHttpInterceptor,
)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.run import Run, RunNotRunningException
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

from common.flower_polls import (
    HEARTBEAT_RANGE_S,
    PULL_BACKOFF_CAP_S,
    PULL_BACKOFF_S,
    set_heartbeat,
)
from wire.stream_samples import DEFAULT_TOPIC_PREFIX, BrokerAuth, parse_broker

log = logging.getLogger("edgeflex.agent")

APP_ID = "edgeflex/edgeflex"  # publisher/name of the app bundle this agent can run
ACQUIRE_METHOD = "/flwr.proto.Runtime/AcquireTask"  # what the SuperNode's secret protects
DEFAULT_POLL_S = 0.1


@dataclass(frozen=True)
class AgentConfig:
    runtime_api: str  # host:port of the SuperNode's Runtime API (its --port)
    poll_s: float = DEFAULT_POLL_S  # wait between task polls while idle
    secret: bytes | None = None  # the SuperNode's --superexec-auth-secret-file contents


def installed_version() -> str:
    try:
        return version("edgeflex")
    except PackageNotFoundError:  # a checkout run without `pip install -e .`
        return "unknown"


def check_app(run: Run) -> None:
    """Refuse a run of another app: the agent runs its own installed code, not the bundle."""
    if run.fab_id != APP_ID:
        raise RuntimeError(f"this agent runs {APP_ID}, the run's app is {run.fab_id!r}")
    ours = installed_version()
    if run.fab_version != ours:
        raise RuntimeError(
            f"the run's app is {APP_ID} {run.fab_version}, this agent has {ours} installed"
        )


def _runtime_client(
    address: str, interceptors: list[object], *, retry: bool = True
) -> RuntimeHttpClient:
    """A client of the SuperNode's Runtime API. With ``retry``, Flower's retries wait out an
    unreachable SuperNode, and stop this process (SIGINT: the agent exits) when the SuperNode
    refuses its secret."""
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,  # the Runtime API is the SuperNode's loopback port
        root_certificates=None,
        interceptors=interceptors,  # type: ignore[arg-type]
        retry_invoker=make_simple_http_retry_invoker() if retry else None,
    )


def _heartbeat(client: RuntimeHttpClient) -> Callable[[], bool]:
    """Keep the task's token alive while it runs. Flower's own raises SIGINT when the
    SuperNode refuses a beat; here a refused beat only ends the beats: the push with the
    dead token then fails, and the agent goes on to the next task."""
    request = SendTaskHeartbeatRequest()

    def beat() -> bool:
        try:
            client.SendTaskHeartbeat(request)
        except (Exception, RunNotRunningException):  # a missed beat is retried
            return False
        return True

    return beat


def pull_task_input(client: RuntimeHttpClient) -> tuple[Message, Context, Run]:
    """The task's message, the node's context and the run: Flower's ``pull_task_input``
    (flwr 1.42 ``supernode/runtime/run_clientapp.py``) without the app bundle (the agent runs
    its installed code), and with a short pull back-off: a task can be acquired before its
    SuperNode holds all of the message's objects, and Flower's first back-off (1 s) is longer
    than a whole round here."""
    task = client.PullTaskInput(PullTaskInputRequest())
    context = context_from_proto(task.context)
    run = run_from_proto(task.run)
    pulled = client.PullMessages(PullAppMessagesRequest())
    if not pulled.messages_list:
        raise RuntimeError("the SuperNode's Runtime API gave no message for the task")
    node = Node(node_id=context.node_id)
    tree = pulled.message_object_trees[0]
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(
            client.ConfirmMessageReceived, node, context.run_id
        ),
        return_type=Message,
        initial_backoff=PULL_BACKOFF_S,
        backoff_cap=PULL_BACKOFF_CAP_S,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's own sets it
    return message, context, run


def run_task(address: str, token: str, app: ClientApp) -> str:
    """Run one acquired task: pull, call the app, push the reply and the context.
    Returns the task's sub-status; whatever goes wrong is logged and ends this task only
    (an exception in the app becomes an error reply, as in Flower's own ClientApp process)."""
    client = _runtime_client(  # no retries: a task that cannot reach its SuperNode fails
        address,
        [
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor(token),
        ],
        retry=False,
    )
    heartbeat = HeartbeatSender(_heartbeat(client))
    heartbeat.start()
    message: Message | None = None
    context: Context | None = None
    reply: Message | None = None
    status, details = SubStatus.FAILED, "the agent failed before the task's input arrived"
    try:
        message, context, run = pull_task_input(client)
        check_app(run)
        pulled_at = time.time()
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
        log.info(
            "%s: pulled %.3f s after it was created, answered in %.3f s",
            message.metadata.message_type,
            pulled_at - message.metadata.created_at,
            time.time() - pulled_at,
        )
    except (Exception, RunNotRunningException) as exc:  # one bad task must not stop the agent
        details = f"{type(exc).__name__}: {exc}"
        log.error("task failed: %s", details)
        if message is not None:
            reply = Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details[:500]),
                reply_to=message,
            )
    try:
        if reply is not None and context is not None:
            push_message(client, reply, context)
        push_task_output(client, context, status, details)
    except (Exception, RunNotRunningException) as exc:
        status = SubStatus.FAILED
        log.error("could not hand the task back to the SuperNode: %s: %s", type(exc).__name__, exc)
    finally:
        if heartbeat.is_running:
            heartbeat.stop()
        client.close()
    return status


def serve(config: AgentConfig, app: ClientApp, stop: threading.Event) -> int:
    """Poll the SuperNode for tasks and run each in this process until ``stop`` is set.
    Returns the number of tasks run."""
    interceptors: list[object] = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
    if config.secret is not None:
        interceptors.append(
            SuperExecAuthHttpInterceptor(
                master_secret=config.secret, protected_methods={ACQUIRE_METHOD}
            )
        )
    control = _runtime_client(config.runtime_api, interceptors)
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    tasks = 0
    try:
        while not stop.is_set():
            acquired = control.AcquireTask(request)
            if acquired.HasField("task") and acquired.token:
                run_task(config.runtime_api, acquired.token, app)
                tasks += 1
                continue  # a round's next phase may be waiting already
            stop.wait(config.poll_s)
    finally:
        control.close()
    return tasks


def warm_up() -> None:
    """Pay a fresh process's one-off costs while it waits for its first task, not in it: the
    data libraries a partition is made with (2-3 s here) and torch's first backward pass
    (1.6 s)."""
    began = time.monotonic()
    import datasets  # noqa: F401
    import flwr_datasets.partitioner  # noqa: F401
    import sklearn.datasets  # noqa: F401
    import sklearn.model_selection  # noqa: F401
    import torch

    layer = torch.nn.Linear(4, 2)
    layer(torch.zeros(1, 4)).sum().backward()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    log.info("warmed up in %.1f s (data libraries, first backward pass)", time.monotonic() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="edgeflex-agent", description=__doc__.split("\n", 1)[0].strip()
    )
    parser.add_argument(
        "--runtime-api",
        default="127.0.0.1:9094",
        help="the SuperNode's Runtime API (flower-supernode --isolation process --port)",
    )
    parser.add_argument(
        "--superexec-auth-secret-file",
        type=Path,
        help="the file the SuperNode reads with --superexec-auth-secret-file (required)",
    )
    parser.add_argument(
        "--no-superexec-auth",
        action="store_true",
        help="serve a SuperNode started without a secret: any local process could then take "
        "this node's tasks (for a trusted machine only)",
    )
    parser.add_argument("--poll-s", type=float, default=DEFAULT_POLL_S, help="idle poll")
    parser.add_argument(
        "--mqtt",
        metavar="HOST:PORT",
        help="train on samples from this MQTT broker (the node's topic) instead of replaying "
        "its partition; needs --partition-id",
    )
    parser.add_argument("--partition-id", type=int, help="this node's partition (its topic)")
    parser.add_argument("--topic-prefix", default=DEFAULT_TOPIC_PREFIX)
    parser.add_argument("--mqtt-tls-ca", type=Path, help="CA certificate: MQTT over TLS")
    parser.add_argument("--mqtt-username", help="for a broker with a password file")
    parser.add_argument("--mqtt-password-file", type=Path, help="first line: the password")
    args = parser.parse_args(argv)
    broker = None
    if args.mqtt is not None:
        if args.partition_id is None or args.partition_id < 0:
            parser.error("--mqtt needs --partition-id (>= 0): it names the node's topic")
        try:
            broker = parse_broker(args.mqtt)
            auth = BrokerAuth.of(args.mqtt_tls_ca, args.mqtt_username, args.mqtt_password_file)
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
    if not 0.001 <= args.poll_s <= 60:
        parser.error(f"--poll-s must be within [0.001, 60] s, got {args.poll_s}")
    if (args.superexec_auth_secret_file is None) != args.no_superexec_auth:
        parser.error(
            "give --superexec-auth-secret-file (the SuperNode's), or --no-superexec-auth for a "
            "SuperNode without one"
        )
    try:
        secret = load_superexec_auth_secret(
            None
            if args.superexec_auth_secret_file is None
            else str(args.superexec_auth_secret_file)
        )
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per poll
    from client.app import make_app  # torch and the model: imported once, here

    # A task's heartbeat at Flower's shortest interval (a beat every 4 s, not 20 s): a SuperNode
    # told to expect it (edgeflex-supernode --heartbeat-interval-s 10) gives up on the task of a
    # killed agent after 20 s instead of a minute.
    set_heartbeat(flower_heartbeat, interval_s=HEARTBEAT_RANGE_S[0])
    # Beside the task loop, not before it: a restarted agent takes its node's next task at once.
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    live, subscriber = None, None
    if broker is not None:
        from client.live_stream import LiveStream, subscribe

        live = LiveStream(args.partition_id)
        subscriber = subscribe(live, broker, args.topic_prefix, auth)
        log.info(
            "streaming %s/node-%d from %s:%d",
            args.topic_prefix,
            args.partition_id,
            broker.host,
            broker.port,
        )
    app = make_app(live)
    stop = threading.Event()

    def request_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()
        if live is not None:
            live.interrupt()  # a task waiting for samples ends now

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    config = AgentConfig(runtime_api=args.runtime_api, poll_s=args.poll_s, secret=secret)
    log.info("serving the SuperNode at %s", config.runtime_api)
    try:
        tasks = serve(config, app, stop)
    finally:
        if subscriber is not None:
            subscriber.disconnect()  # the broker keeps the session for the next start
            subscriber.loop_stop()
    log.info("stopped after %d tasks", tasks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
