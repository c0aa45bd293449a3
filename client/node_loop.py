"""A device's node in one process: the context of its run (only this agent's own app, at its
installed version) and each message taken through the ClientApp, pulled, answered and pushed
as Flower's SuperNode and its ClientApp process would."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

from flwr.app import Context, Error, Message, UserConfig
from flwr.clientapp import ClientApp

from client.data_process import partition_in_child
from client.device_state import DeviceState
from client.fleet import (
    Connection,
    ErrorCode,
    ObjectTree,
    Run,
    RunNotRunningException,
    fused_run_config,
    pull_message,
    push_message,
)
from client.node import LOCAL_DATA_KEY, keep_local_data, node_identity
from common.settings import Settings
from state.archive import StateError

log = logging.getLogger("edgeflex.agent")

APP_ID = "edgeflex/edgeflex"  # publisher/name of the app bundle this agent can run


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


@dataclass
class Node:
    """One device's node: its connection, the context of its run, and what it runs."""

    connection: Connection
    app: ClientApp
    node_config: UserConfig
    device: DeviceState = field(default_factory=DeviceState)
    context_of_run: Context | None = None  # one run at a time
    refused_runs: dict[int, str] = field(default_factory=dict)  # run id -> why

    def context(self, run_id: int) -> Context:
        """The run's context: made from the run and its app bundle's config on its first
        message (a run of another app or version is refused, once), with the state the
        state directory holds. A new run replaces the last one, in memory and on disk."""
        if run_id in self.refused_runs:
            raise RuntimeError(self.refused_runs[run_id])
        if self.context_of_run is None or self.context_of_run.run_id != run_id:
            run = self.connection.get_run(run_id)
            try:
                check_app(run)
            except RuntimeError as exc:
                self.refused_runs[run_id] = str(exc)
                raise
            fab = self.connection.get_fab(run.fab_hash, run_id)
            self.device.forget_runs_but(run_id)
            self.context_of_run = Context(
                run_id=run_id,
                node_id=self.connection.node_id,
                node_config=self.node_config,
                state=self.device.load(run_id),
                run_config=fused_run_config(fab, run),
                series_id=run.series_id,
            )
        return self.context_of_run

    def _push_error(self, message: Message, code: int, reason: str, began: float) -> None:
        try:
            error = Message(Error(code=code, reason=reason[:500]), reply_to=message)
            push_message(self.connection, error, time.monotonic() - began)
        except (Exception, RunNotRunningException) as exc:
            log.error("could not push the error reply: %s: %s", type(exc).__name__, exc)

    @staticmethod
    def make_local_data(context: Context) -> None:
        """The node's partition, made once by a child process (``client.data_process``): the
        data libraries stay out of this process. A failure is logged; the app then makes the
        partition itself, or says what is wrong."""
        if LOCAL_DATA_KEY in context.state:
            return
        try:
            settings = Settings.from_run_config(context.run_config, tables=False)
            partition_id = node_identity(context, settings)
            keep_local_data(context, partition_in_child(dict(context.run_config), partition_id))
        except Exception as exc:
            log.error("could not make the partition in a child process: %s", exc)

    def handle(self, message: Message, tree: ObjectTree) -> None:
        """Run one message: pull, call the app, push the reply; whatever goes wrong ends this
        message only (an exception in the app becomes an error reply, as in Flower)."""
        began, received_at = time.monotonic(), time.time()
        try:
            context = self.context(message.metadata.run_id)
        except RunNotRunningException:
            return  # the run ended while the message waited
        except Exception as exc:  # answered, so the server need not wait for its timeout
            log.error("refused message %s: %s", message.metadata.message_id, exc)
            self._push_error(message, ErrorCode.INVALID_FAB, str(exc), began)
            return
        try:
            message = pull_message(self.connection, message, tree)
        except (Exception, RunNotRunningException) as exc:
            log.error("could not take message %s: %s", message.metadata.message_id, exc)
            return
        self.make_local_data(context)
        try:
            reply = self.app(message=message, context=context)
        except Exception as exc:  # one bad message must not stop the device
            details = f"{type(exc).__name__}: {exc}"
            log.error("message failed: %s", details)
            reply = Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details[:500]),
                reply_to=message,
            )
        try:
            self.device.save(context.run_id, context.state)
        except (OSError, StateError) as exc:  # a full card, an undeclared entry: the reply goes
            log.error("could not keep the state: %s", exc)
        try:
            push_message(self.connection, reply, time.monotonic() - began)
        except (Exception, RunNotRunningException) as exc:
            log.error("could not push the reply: %s: %s", type(exc).__name__, exc)
            return
        log.info(
            "%s: pulled %.3f s after it was created, answered in %.3f s",
            message.metadata.message_type,
            received_at - message.metadata.created_at,
            time.monotonic() - began,
        )
