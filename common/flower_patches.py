"""Every change edgeflex makes inside Flower, in this one module (read against flwr 1.42.x).

On another Flower each patch stands aside: it leaves Flower as it is and logs one warning line
that names it, what it fixes and what the user gets without it (``stands_aside``), so a run on a
new Flower goes on with Flower's own behaviour and says what that costs. On 1.42.x a patch
refuses a source without the names it replaces (ValueError), so a changed patch release fails
loudly here.

``PATCHES`` lists each patch: the Flower it checks, what Flower does, what edgeflex does instead
and why, what is lost without it, and when it can go. docs/architecture.md lists the other
modules that import a private Flower module or write a private Flower attribute (a test keeps
both lists true).

The polls in detail (``short-polls``):

Read in flwr 1.42's source, each message of a round waits on fixed constants that dwarf a
round of small models on a device:
- a SuperNode with nothing to do sleeps a literal 3 s before it asks the SuperLink again, and
  looks for its ClientApp's reply every 0.5 s (``supernode/start_client_internal.py``);
- a message is visible before all its objects are: whoever pulls it first (the SuperNode from
  the SuperLink, the ServerApp's grid for a reply) backs off 1 s, then 2 s, ... for the
  objects still on their way (``pull_objects``' ``initial_backoff``).
These patches replace those module-level names in the processes that opt in. The price: an idle node
asks the SuperLink ``1 / idle-poll-s`` times a second instead of once every 3 s.

A SuperNode also tells the SuperLink its heartbeat interval (Flower's: 30 s, not settable), and
the SuperLink drops a node silent for twice that: a dead device keeps its place for a minute.
The same constant is how long a SuperNode waits for a task whose process died
before it answers for it with an error and takes the next message. ``set_heartbeat`` lets a
node choose within Flower's own bounds (10-1,800 s).

The simulation pickup in detail:

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
the FedAvg yardstick of ``benchmarks/bench_flower_fedavg.py``, import parts of ``server``). It
does nothing in a process without the engine (deployment, tests, scripts), stands aside on
another Flower or a function whose source differs from the one it replaces, and says so in the
log when the thread was already running (then rounds keep the 0.1-s wait). Only wall time
changes: the records are the same.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from types import FrameType, ModuleType
from typing import Any

import flwr
from flwr.common import log

SUPPORTED_FLWR = "1.42."


@dataclass(frozen=True)
class Patch:
    """One change inside Flower: ``flower``, the versions it was read against and applies to
    (elsewhere it stands aside); ``upstream``, what that Flower does; ``change``, what edgeflex
    does instead and why; ``without``, what a user gets where it stands aside (what breaks,
    where it is needed for more than speed); ``removable_when``, what upstream change would
    make it unnecessary."""

    flower: str
    upstream: str
    change: str
    without: str
    removable_when: str


PATCHES: dict[str, Patch] = {
    "shorten_supernode": Patch(
        flower=SUPPORTED_FLWR + "x",
        upstream="a SuperNode sleeps a literal 3 s when idle, looks for its ClientApp's reply "
        "every 0.5 s, and backs off 1 s, 2 s, ... for a message's late objects "
        "(supernode/start_client_internal.py, pull_objects)",
        change="shorter polls, opt-in (short-polls): a round of a small model on a device is "
        "shorter than one of those waits",
        without="speed only: each message to a SuperNode waits up to 3 s, each reply 0.5 s, "
        "and late objects 1 s or more, so deployed rounds take seconds longer",
        removable_when="a SuperNode takes its poll intervals and pull back-off as options",
    ),
    "shorten_grid_pull": Patch(
        flower=SUPPORTED_FLWR + "x",
        upstream="the ServerApp's grid backs off 1 s, 2 s, ... for a reply's late objects, for "
        "up to 2 hours (superlink/grid/http_grid.py)",
        change="10-ms back-off until the exchange's deadline: a killed node's half-pushed "
        "reply would otherwise hold the round for its push session's 180 s",
        without="breaks round-timeout-s when a node dies between pushing its reply and the "
        "reply's objects: the round waits up to 180 s for each such reply; otherwise late "
        "objects are pulled after 1 s, 2 s, ... instead of 10 ms",
        removable_when="Grid.send_and_receive's timeout bounds the pull of a reply's objects",
    ),
    "set_heartbeat": Patch(
        flower=SUPPORTED_FLWR + "x",
        upstream="HEARTBEAT_DEFAULT_INTERVAL is a constant 30 s: a dead device keeps its place, "
        "and a dead task holds its node, for a minute",
        change="a node chooses its interval within Flower's own bounds (10-1,800 s)",
        without="--heartbeat-interval-s is ignored: Flower's 30 s holds, so a dead device "
        "keeps its place, and a dead task its node, for 60 s",
        removable_when="flower-supernode takes a heartbeat interval option",
    ),
    "shorten_pickup": Patch(
        flower=SUPPORTED_FLWR + "x",
        upstream="the simulation engine looks for new messages node by node, then waits a "
        "literal 0.1 s (server/superlink/fleet/vce/vce_api.py, add_messages_to_queue)",
        change="the same lookups in one pass, then a 5-ms wait: the 0.1 s was a large part of "
        "a small model's round, and 10,000 nodes cost 10^8 reads a pickup",
        without="speed only (the records are the same): each simulated round waits up to "
        "0.1 s more, and a pickup reads every message once per node",
        removable_when="the engine is woken by new messages instead of polling",
    ),
    "set_task_identity": Patch(
        flower=SUPPORTED_FLWR + "x",
        upstream="Message() reads a run, node and task identity (supercore/task_identity.py) "
        "that only a running federation sets",
        change="sets one for the in-process federation of tests and benchmarks, which builds "
        "messages outside a federation",
        without="breaks the tests and benchmarks that build messages outside a federation "
        "where Message() needs the identity; runs (simulation, deployment) are unaffected",
        removable_when="Message() can be built without a task identity",
    ),
}
IDLE_SLEEP_S, REPLY_SLEEP_S = 3, 0.5  # the literals in start_client_internal.py
DEFAULT_IDLE_POLL_S, DEFAULT_REPLY_POLL_S = 0.1, 0.05
PULL_BACKOFF_S, PULL_BACKOFF_CAP_S = 0.01, 0.5  # Flower's: 1 s, doubling up to 10 s
POLL_RANGE_S = (0.01, 3.0)
HEARTBEAT_RANGE_S = (10.0, 1800.0)  # the SuperLink refuses others (HEARTBEAT_MIN/MAX_INTERVAL)


def tested_flower(version: str | None = None) -> bool:
    """Whether this (or ``version``) is the Flower the patches were read against."""
    version = flwr.__version__ if version is None else version
    return version.startswith(SUPPORTED_FLWR)


def stand_aside_warning(name: str, version: str) -> str:
    """The line that says patch ``name`` is off on flwr ``version``, and what that costs."""
    patch = PATCHES[name]
    return (
        f"edgeflex: flwr {version} is untested (patches read against {patch.flower}): "
        f"{name} stands aside. It fixes: {patch.change}. Without it: {patch.without}"
    )


def stands_aside(name: str) -> bool:
    """True, with a warning naming what is lost, where this Flower is not the one patch
    ``name`` was read against: the patch then leaves Flower as it is."""
    if tested_flower():
        return False
    log(WARNING, "%s", stand_aside_warning(name, flwr.__version__))
    return True


def check_flower(version: str | None = None, *, what: str, advice: str) -> None:
    """ValueError unless this (or ``version``) is the Flower ``what`` was read against: for
    code that cannot stand aside (the edge agent is a node of its own on Flower's internals)."""
    version = flwr.__version__ if version is None else version
    if not tested_flower(version):
        raise ValueError(f"{what} flwr {SUPPORTED_FLWR}x only; this is flwr {version}: {advice}")


def _require(module: ModuleType, *snippets: str) -> None:
    source = inspect.getsource(module)
    for snippet in snippets:
        if snippet not in source:
            raise ValueError(f"{module.__name__} has no {snippet!r}: Flower changed; not patched")


class ShortSleeps:
    """Stands in for the ``time`` module inside a Flower module: its fixed sleeps are
    replaced by shorter ones, everything else is ``time``'s own."""

    def __init__(self, replacements: Mapping[float, float]) -> None:
        self.replacements = dict(replacements)

    def sleep(self, seconds: float) -> None:
        time.sleep(self.replacements.get(seconds, seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _short_pull(module: ModuleType) -> None:
    _require(module, "pull_objects(")
    module.pull_objects = functools.partial(  # type: ignore[attr-defined]
        module.pull_objects, initial_backoff=PULL_BACKOFF_S, backoff_cap=PULL_BACKOFF_CAP_S
    )


def shorten_supernode(
    module: ModuleType, idle_s: float = DEFAULT_IDLE_POLL_S, reply_s: float = DEFAULT_REPLY_POLL_S
) -> None:
    """Patch the SuperNode's loop (``flwr.supernode.start_client_internal``)."""
    for name, value in (("idle poll", idle_s), ("reply poll", reply_s)):
        if not POLL_RANGE_S[0] <= value <= POLL_RANGE_S[1]:
            raise ValueError(f"{name} must be within {list(POLL_RANGE_S)} s, got {value}")
    if stands_aside("shorten_supernode"):
        return
    _require(module, f"time.sleep({IDLE_SLEEP_S})", f"time.sleep({REPLY_SLEEP_S})")
    _short_pull(module)
    module.time = ShortSleeps({IDLE_SLEEP_S: idle_s, REPLY_SLEEP_S: reply_s})  # type: ignore[attr-defined]


@dataclass
class LateObjects:
    """Until when the ServerApp's grid waits for a reply's objects: the deadline of the
    exchange in progress (monotonic seconds; ``TimedGrid`` sets it), else ``fallback_s``."""

    deadline: float | None = None
    fallback_s: float = 600.0

    def max_time(self) -> float:
        if self.deadline is None:
            return self.fallback_s
        return max(LAST_TRY_S, self.deadline - time.monotonic())


LAST_TRY_S = 0.05  # past the deadline: one short try, then an error reply
LATE_OBJECTS = LateObjects()


@contextlib.contextmanager
def late_objects_until(deadline: float | None) -> Iterator[None]:
    """While open, the grid waits for a reply's objects until ``deadline`` at most."""
    LATE_OBJECTS.deadline = deadline
    try:
        yield
    finally:
        LATE_OBJECTS.deadline = None


def shorten_grid_pull(fallback_s: float) -> None:
    """Patch the ServerApp's deployment grid (``flwr.superlink.grid.http_grid``): a reply
    whose objects are still arriving is pulled again after 10 ms, not 1 s, and only until the
    exchange's deadline (``late_objects_until``; else ``fallback_s``, the round timeout), not
    for Flower's 2 hours. A node killed between pushing its reply and its reply's objects
    leaves a reply the SuperLink serves without them until its push session expires (180 s);
    Flower pulls a round's replies one after another, so each such reply would hold the whole
    round that long. Past the deadline Flower's grid turns it into an error reply."""
    if stands_aside("shorten_grid_pull"):
        return
    from flwr.superlink.grid import http_grid

    _require(http_grid, "pull_objects(")
    if getattr(http_grid.pull_objects, "edgeflex_patched", False):  # once per process
        return
    LATE_OBJECTS.fallback_s = fallback_s
    flowers = http_grid.pull_objects

    def pull_objects(*args: Any, **kwargs: Any) -> Any:
        kwargs.update(
            initial_backoff=PULL_BACKOFF_S,
            backoff_cap=PULL_BACKOFF_CAP_S,
            max_time=LATE_OBJECTS.max_time(),
        )
        return flowers(*args, **kwargs)

    pull_objects.edgeflex_patched = True  # type: ignore[attr-defined]
    http_grid.pull_objects = pull_objects


def set_heartbeat(*modules: ModuleType, interval_s: float) -> None:
    """A heartbeat interval in Flower 1.42's modules that read ``HEARTBEAT_DEFAULT_INTERVAL``:
    what a SuperNode announces to the SuperLink (``flwr.supernode.fleet_http_connection``), how
    often a process beats (``flwr.supercore.heartbeat``: every 0.7-0.9 x (interval - 5 s)), and
    how long a SuperNode waits for a silent task before it answers with an error
    (``flwr.supercore.corestate.in_memory_corestate``: twice the interval)."""
    low, high = HEARTBEAT_RANGE_S
    if not low <= interval_s <= high:
        raise ValueError(
            f"heartbeat interval must be within [{low:g}, {high:g}] s, got {interval_s}"
        )
    if stands_aside("set_heartbeat"):
        return
    for module in modules:
        _require(module, "HEARTBEAT_DEFAULT_INTERVAL")
    for module in modules:
        module.HEARTBEAT_DEFAULT_INTERVAL = interval_s  # type: ignore[attr-defined]


# --- the simulation engine ---------------------------------------------------------------


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
    original = module.add_messages_to_queue
    if getattr(original, "edgeflex_pickup_s", None) is not None:
        return True
    if stands_aside("shorten_pickup"):
        return False
    try:
        source = inspect.getsource(original)
    except (OSError, TypeError) as exc:
        log(WARNING, "edgeflex: simulation pickup not shortened: %s", exc)
        return False
    missing = [snippet for snippet in REPLACED_SOURCE if snippet not in source]
    if missing:
        log(WARNING, "edgeflex: simulation pickup not shortened: Flower changed %s", missing)
        return False

    def add_messages_to_queue(
        state: Any, queue: Any, nodes_mapping: Any, f_stop: threading.Event
    ) -> None:
        one_pass = reads_in_one_pass(state)
        while not f_stop.is_set():
            began = time.monotonic()
            if one_pass:
                for msg in first_undelivered(state, nodes_mapping):
                    queue.put(msg)
            else:
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


# What ``first_undelivered`` does in one pass, flwr 1.42's InMemoryLinkState.get_message_ins
# does per node: every stored message is checked (expired ones dropped), and a node's first
# undelivered one is marked delivered and handed out.
GET_MESSAGE_INS_SOURCE = (
    "for msg_id in list(self.message_ins_store.keys()):",
    "self._check_stored_messages({msg_id})",
    "msg_ins.metadata.dst_node_id == node_id",
    'msg_ins.metadata.delivered_at == ""',
    "msg_ins.metadata.delivered_at = delivered_at",
)


def reads_in_one_pass(state: Any) -> bool:
    """Whether ``state`` is the in-memory link state whose lookup ``first_undelivered`` does
    for every node at once (else the engine asks node by node, as Flower does)."""
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

    if type(state) is not InMemoryLinkState:
        return False
    source = inspect.getsource(InMemoryLinkState.get_message_ins)
    return all(snippet in source for snippet in GET_MESSAGE_INS_SOURCE)


def first_undelivered(state: Any, nodes: Any) -> list[Any]:
    """Each node's first undelivered message, marked delivered: what
    ``state.get_message_ins(node, limit=1)`` gives node by node, in one pass over the stored
    messages. Flower's asks once per node and each ask reads every stored message, so a round
    with a message for each of 10,000 nodes cost 10^8 reads per pickup."""
    from flwr.supercore.date import now

    picked: dict[int, Any] = {}
    with state.lock:
        state._check_stored_messages(set(state.message_ins_store))  # drops expired ones
        for msg in state.message_ins_store.values():
            node = msg.metadata.dst_node_id
            if msg.metadata.delivered_at == "" and node in nodes and node not in picked:
                picked[node] = msg
        delivered_at = now().isoformat()
        for msg in picked.values():
            msg.metadata.delivered_at = delivered_at
    return list(picked.values())


def tune_simulation_process() -> None:
    """In Flower's simulation process only: the short pickup, and one BLAS thread for numpy
    (its OpenBLAS threads stalled there on small products while the engine's and Ray's threads
    shared the 2 cores: the 1,000-client Synthetic test split took minutes instead of 0.6 s)."""
    if not in_simulation_engine():
        return
    from threadpoolctl import threadpool_limits

    shorten_pickup()
    threadpool_limits(1, user_api="blas")


# --- messages outside a running federation ---------------------------------------------------


def set_task_identity() -> Callable[[], None]:
    """Give this process the run, node and task identity ``Message()`` reads (flwr 1.42's
    ``TaskIdentity``, set only inside a running federation): for the in-process federation of
    tests and benchmarks. Returns what puts the previous identity back."""
    if stands_aside("set_task_identity"):
        return lambda: None
    from flwr.supercore.task_identity import TaskIdentity

    names = ("_run_id", "_node_id", "_task_id")
    if not all(hasattr(TaskIdentity, name) for name in names):
        raise ValueError("flwr's TaskIdentity has no _run_id, _node_id, _task_id: Flower changed")
    previous = {name: getattr(TaskIdentity, name) for name in names}
    for name in names:
        setattr(TaskIdentity, name, 1)

    def restore() -> None:
        for name, value in previous.items():
            setattr(TaskIdentity, name, value)

    return restore
