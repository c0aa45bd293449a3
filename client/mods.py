"""Flower mods of the ClientApp: cross-cutting steps around every handler."""

from __future__ import annotations

import time

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from client.run_settings import run_settings
from wire.keys import METRICS_KEY, RECEIVED_AT, SENT_AT
from wire.packing import is_packed, pack, unpack


def timing_stamps(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """timing = "measured": stamp when the handler began and when its reply was made (wall
    clock), so the server can split the round trip into download, busy and upload."""
    received_at = time.time()
    reply = call_next(msg, context)
    measured = run_settings(context).timing.timing == "measured"
    if measured and not reply.has_error() and METRICS_KEY in reply.content.metric_records:
        metrics = reply.content.metric_records[METRICS_KEY]
        metrics[RECEIVED_AT] = received_at
        metrics[SENT_AT] = time.time()
    return reply


def packed_content(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Unpack an instruction the server packed into one object (``wire.packing``), and pack
    the reply the same way: the outermost mod, so the reply is packed as it leaves."""
    if not msg.has_content() or not is_packed(msg.content):
        return call_next(msg, context)
    msg.content = unpack(msg.content)
    reply = call_next(msg, context)
    if reply.has_content():
        reply.content = pack(reply.content)
    return reply
