"""A shorter wait in Flower 1.42's simulation engine before it picks up a round's messages.

Read in flwr 1.42's source (``server/superlink/fleet/vce/vce_api.py``): the simulation engine
runs in the same process as the ServerApp (``flwr-simulation``), and one thread of it looks for
new messages for every node, then waits a literal 0.1 s (``add_messages_to_queue``). A round's
messages thus wait 0-0.1 s before any ClientApp sees them, which for a small model is a large
part of the round. ``shorten_pickup`` replaces that function with one that does the same
lookups and then waits ``PICKUP_S``, or twice the time its lookups took if that is longer (so
with many nodes the thread still leaves the ServerApp most of the interpreter's time).

It must run before the engine starts that thread: the ServerApp module is imported first, in
its own thread, while the engine is still starting Ray (seconds), so ``server/app.py`` calls
``tune_simulation_process`` as it is imported (not ``server/__init__``: other apps, such as
the FedAvg yardstick of ``scripts/bench_flower_fedavg.py``, import parts of ``server``). It
does nothing in a process without the engine (deployment, tests, scripts), refuses any Flower
but 1.42.x, or a function whose source differs from the one it replaces, and says so in the
log when the thread was already running (then rounds keep the 0.1-s wait). Only wall time
changes: the records are the same.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from logging import INFO, WARNING
from types import FrameType
from typing import Any

VCE_MODULE = "flwr.server.superlink.fleet.vce.vce_api"
PICKUP_S = 0.005
# What the replaced function must consist of (flwr 1.42): its loop, lookups and fixed wait.
REPLACED_SOURCE = (
    "while not f_stop.is_set():",
    "for node_id in nodes_mapping.keys():",
    "state.get_message_ins(node_id=node_id, limit=1)",
    "queue.put(msg)",
    "f_stop.wait(0.1)",
)


def _running(code: Any) -> bool:
    """Whether some thread is executing ``code`` now."""
    return any(frame.f_code is code for frame in _frames())


def _frames() -> list[FrameType]:
    frames = []
    for top in sys._current_frames().values():
        frame: FrameType | None = top
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
    return frames


def in_simulation_engine() -> bool:
    """Whether this process runs Flower's simulation engine (``flwr-simulation``)."""
    return VCE_MODULE in sys.modules


def shorten_pickup(pickup_s: float = PICKUP_S) -> bool:
    """Patch the simulation engine in this process, if it is here; True when patched."""
    module = sys.modules.get(VCE_MODULE)
    if module is None:
        return False
    from flwr.common.logger import log

    from common.flower_polls import check_flower

    original = module.add_messages_to_queue
    if getattr(original, "edgeflex_pickup_s", None) is not None:
        return True
    try:
        check_flower()
        source = inspect.getsource(original)
    except (ValueError, OSError, TypeError) as exc:
        log(WARNING, "edgeflex: simulation pickup not shortened: %s", exc)
        return False
    missing = [snippet for snippet in REPLACED_SOURCE if snippet not in source]
    if missing:
        log(WARNING, "edgeflex: simulation pickup not shortened: Flower changed %s", missing)
        return False

    def add_messages_to_queue(
        state: Any, queue: Any, nodes_mapping: Any, f_stop: threading.Event
    ) -> None:
        while not f_stop.is_set():
            began = time.monotonic()
            for node_id in nodes_mapping:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(msg)
            f_stop.wait(max(pickup_s, 2 * (time.monotonic() - began)))

    add_messages_to_queue.edgeflex_pickup_s = pickup_s  # type: ignore[attr-defined]
    add_messages_to_queue.edgeflex_replaced = original  # type: ignore[attr-defined]
    module.add_messages_to_queue = add_messages_to_queue  # type: ignore[attr-defined]
    if _running(original.__code__):
        log(WARNING, "edgeflex: the simulation engine started first: its 0.1-s pickup stays")
        return False
    log(INFO, "edgeflex: simulation pickup every %.3f s (Flower's: 0.1 s)", pickup_s)
    return True


def tune_simulation_process() -> None:
    """In Flower's simulation process only: the short pickup, and one BLAS thread for numpy
    (its OpenBLAS threads stalled there on small products while the engine's and Ray's threads
    shared the 2 cores: the 1,000-client Synthetic test split took minutes instead of 0.6 s)."""
    if not in_simulation_engine():
        return
    from threadpoolctl import threadpool_limits

    shorten_pickup()
    threadpool_limits(1, user_api="blas")
