"""The ClientApp: wiring only. Each handler parses its instruction with the wire package, looks
its collective up in the table, and replies; the timing stamps are a mod.

Per training message: instruction → model (dense, or the replica brought up to date) → local
training (partition or stream buffer, plus injected samples) → reports the ratio policy asked
for → the collective's client half (error feedback and compression) → reply.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from client.local_model import local_model
from client.local_round import Trainer, train_locally
from client.mods import packed_content, timing_stamps
from client.node import node_identity, store_directory
from client.replica import bring_up_to_date
from client.reports import reports
from client.run_settings import run_settings
from client.saved_state import restore_state, save_state
from collectives import COLLECTIVES
from collectives.base import ActionHandler, ClientAction, ClientJob, whole_entries
from collectives.dense import Dense
from common.data import data_spec
from common.settings import Settings
from compress import ENCODINGS, SELECTORS
from state.store import use_store
from wire.injection import samples_of
from wire.keys import (
    IDENTIFY_ACTION,
    METRICS_KEY,
    RESTORE_STATE_ACTION,
    SAVE_STATE_ACTION,
    TRAIN_S,
)
from wire.layout import Layout
from wire.phases import PhaseReply, PhaseRequest
from wire.queries import identity_content
from wire.reports import Report
from wire.train_instruction import TrainInstruction
from wire.train_reply import TrainReply

if TYPE_CHECKING:  # paho-mqtt is imported by the agent only
    from client.live_stream import LiveStream

ENCODING_RNG = 0xC0  # stream of the seeded generator stochastic encodings draw from


def _encoding_rng(
    settings: Settings, partition_id: int, server_round: int, phase: int
) -> np.random.Generator:
    """A generator per (seed, client, round, phase): stochastic rounding repeats with a seed."""
    seed = settings.run.seed
    return np.random.default_rng([seed, ENCODING_RNG, partition_id, server_round, phase])


def train(
    msg: Message,
    context: Context,
    live: LiveStream | None = None,
    shared_files: bool = True,
    trainer: Trainer = train_locally,
    device: str | None = None,
) -> Message:
    settings = run_settings(context)
    # local training runs where the model is; an agent's own --device replaces the run's
    trained = local_model(
        settings.training.model,
        data_spec(settings),
        settings.run.seed,
        settings.training.device if device is None else device,
    )
    model, layout = trained.module, trained.layout
    instruction = TrainInstruction.parse(msg.content, layout.size)
    if shared_files:  # a device's agent keeps its own state
        use_store(context.state, store_directory(context, settings))
    if instruction.replica is not None:
        start = bring_up_to_date(context.state, instruction.replica)
    else:
        assert instruction.dense_model is not None
        layout = Layout.of_record(instruction.dense_model)  # as the server sent it
        start = layout.flatten(instruction.dense_model)
    local = trainer(
        context, settings, model, instruction.round, start, samples_of(msg.content), live
    )
    began = time.perf_counter()
    compression = instruction.compression
    collective = COLLECTIVES[Dense.name if compression is None else compression.collective]
    options = settings.compression
    whole = whole_entries(trained.layout, trained.buffers, options.whole_vectors)
    asked: dict[str, Report] = {}
    if compression is not None:
        # a clip scales e as a whole: the reports (ratios of energy) do not change
        asked = reports(context.state, local.result.update, compression, whole)
    server_round = instruction.round.server_round
    payload = collective.client_train(
        ClientJob(
            state=context.state,
            update=local.result.update,
            instruction=instruction,
            layout=layout,
            selector=SELECTORS[options.selector],
            encoding=ENCODINGS[options.encoding].from_settings(options),
            rng=_encoding_rng(settings, local.partition_id, server_round, 0),
            run_seed=settings.run.seed,
            partition_id=local.partition_id,
            whole=whole,
            error_feedback_clip=options.error_feedback_clip,
            content=msg.content,
        )
    )
    reply = TrainReply(
        partition_id=local.partition_id,
        num_examples=local.result.num_examples,
        train_loss=local.result.train_loss,
        stream=local.stream,
        update=payload.update,
        sparse=payload.sparse,
        shared=local.shared,
        collective_records=payload.records,
        collective_metrics=payload.metrics,
        reports=asked,
        compress_s=None if compression is None else time.perf_counter() - began,
    )
    content = reply.to_content()
    if settings.timing.timing == "measured":
        content.metric_records[METRICS_KEY][TRAIN_S] = local.train_s
    return Message(content=content, reply_to=msg)


def _action(handler: ActionHandler, phase: int) -> Callable[[Message, Context], Message]:
    """A Flower handler for one of a collective's further phases."""

    def handle(msg: Message, context: Context) -> Message:
        began = time.perf_counter()
        settings = run_settings(context)
        request = PhaseRequest.parse(msg.content)
        partition_id = node_identity(context, settings)
        sparse = handler(
            ClientAction(
                state=context.state,
                request=request,
                content=msg.content,
                encoding=ENCODINGS[settings.compression.encoding].from_settings(
                    settings.compression
                ),
                rng=_encoding_rng(settings, partition_id, request.server_round, phase),
            )
        )
        reply = PhaseReply(sparse, time.perf_counter() - began)
        return Message(content=reply.to_content(), reply_to=msg)

    return handle


def identify(msg: Message, context: Context) -> Message:
    """clients-per-round: tell the server which partition this node holds."""
    settings = run_settings(context)
    return Message(content=identity_content(node_identity(context, settings)), reply_to=msg)


def make_app(
    live: LiveStream | None = None,
    shared_files: bool = True,
    trainer: Trainer = train_locally,
    device: str | None = None,
) -> ClientApp:
    """The ClientApp; ``live``: the device agent's live stream (MQTT), which its training
    reads instead of replaying the partition; ``shared_files``: it answers the server's
    save-state and restore-state queries and keeps its vectors in the state store when the
    server says so (simulation: the server's file system is its own; a device's agent keeps
    its state itself); ``trainer``: the local round (client/local_round.py), another for a
    problem of its own (tests/ef_problem.py: a quadratic, no data); ``device``: where it
    trains, a device's agent's own choice (None: the run config's ``device``)."""
    client_app = ClientApp(mods=[packed_content, timing_stamps])
    client_app.train()(
        lambda msg, context: train(msg, context, live, shared_files, trainer, device)
    )
    client_app.query(IDENTIFY_ACTION)(identify)
    if shared_files:
        client_app.query(SAVE_STATE_ACTION)(save_state)
        client_app.query(RESTORE_STATE_ACTION)(restore_state)
    for collective in COLLECTIVES.values():
        for phase, (name, handler) in enumerate(collective.client_actions.items(), start=1):
            client_app.train(name)(_action(handler, phase))
    return client_app


app = make_app()  # what Flower loads (pyproject's clientapp): simulation and plain SuperNodes
