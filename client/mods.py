"""Flower mods of the ClientApp: cross-cutting steps around every handler."""

from __future__ import annotations

import time

from flwr.app import Context, Message
from flwr.clientapp.typing import ClientAppCallable

from common.settings import Settings
from wire.keys import METRICS_KEY, RECEIVED_AT, SENT_AT


def timing_stamps(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """timing = "measured": stamp when the handler began and when its reply was made (wall
    clock), so the server can split the round trip into download, busy and upload."""
    received_at = time.time()
    reply = call_next(msg, context)
    measured = Settings.from_run_config(context.run_config, tables=False).timing == "measured"
    if measured and not reply.has_error() and METRICS_KEY in reply.content.metric_records:
        metrics = reply.content.metric_records[METRICS_KEY]
        metrics[RECEIVED_AT] = received_at
        metrics[SENT_AT] = time.time()
    return reply
