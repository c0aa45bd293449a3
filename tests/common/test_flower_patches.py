"""common/flower_patches.py: what each patch changes, that it stands aside on a Flower it was not
read against (saying what is lost), and (the simulation pickup) that it patches only where the
engine is, only when Flower's function is the one read, with the same lookups and a shorter
wait."""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
import time
import types
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from common import flower_patches
from common.flower_patches import PATCHES, PICKUP_S, VCE_MODULE, shorten_pickup
from common.settings import settings_with

# Tests of what a patch changes: on a Flower it was not read against it stands aside instead.
applies_here = pytest.mark.skipif(
    not flower_patches.tested_flower(), reason="on this Flower the patches stand aside"
)


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What Flower's module source reads as (set by each test)."""
    text = [""]
    monkeypatch.setattr(flower_patches.inspect, "getsource", lambda module: text[0])
    return text


def _fake_supernode(source: list[str], text: str) -> types.ModuleType:
    source[0] = text
    module = types.ModuleType("fake_supernode")
    module.pull_objects = lambda ids, **kw: kw  # type: ignore[attr-defined]
    module.time = None  # type: ignore[attr-defined]
    return module


@applies_here
def test_the_supernode_sleeps_are_shortened_and_pulls_back_off_briefly(
    monkeypatch: pytest.MonkeyPatch, source: list[str]
) -> None:
    module = _fake_supernode(source, "time.sleep(3) ... time.sleep(0.5) ... pull_objects(")
    flower_patches.shorten_supernode(module, idle_s=0.2, reply_s=0.05)
    slept: list[float] = []
    monkeypatch.setattr(flower_patches.time, "sleep", slept.append)
    module.time.sleep(3)
    module.time.sleep(0.5)
    module.time.sleep(7)
    assert slept == [0.2, 0.05, 7]  # only Flower's two constants change
    assert module.pull_objects(["a"]) == {"initial_backoff": 0.01, "backoff_cap": 0.5}
    assert module.time.monotonic is flower_patches.time.monotonic


@applies_here
def test_a_changed_flower_source_is_not_patched(source: list[str]) -> None:
    module = _fake_supernode(source, "time.sleep(2) pull_objects(")
    with pytest.raises(ValueError, match=r"has no 'time.sleep\(3\)'"):
        flower_patches.shorten_supernode(module)
    assert module.time is None


UNTESTED = "1.43.0.dev20261026"  # flwr-nightly's version as it was read


def test_only_the_flower_read_is_tested() -> None:
    assert flower_patches.tested_flower("1.42.0") and flower_patches.tested_flower("1.42.7")
    for other in (UNTESTED, "1.43.0", "1.41.2", "1.420.0", "2.0.0"):
        assert not flower_patches.tested_flower(other), other
    with pytest.raises(ValueError, match="the agent flwr 1.42.x only; this is flwr 1.43.0: x"):
        flower_patches.check_flower("1.43.0", what="the agent", advice="x")  # cannot stand aside


def test_on_an_untested_flower_every_patch_stands_aside_and_says_what_is_lost(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A newer Flower runs with Flower's own behaviour: no patch changes anything, nothing
    raises, and one warning line per patch names it, what it fixes and what is lost."""
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.superlink.grid import http_grid

    monkeypatch.setattr(flower_patches.flwr, "__version__", UNTESTED)
    flowers_pull = http_grid.pull_objects
    supernode = types.ModuleType("supernode")
    supernode.time, supernode.pull_objects = time, flowers_pull  # type: ignore[attr-defined]
    heartbeat = types.ModuleType("heartbeat")
    heartbeat.HEARTBEAT_DEFAULT_INTERVAL = 30  # type: ignore[attr-defined]
    engine = types.ModuleType(VCE_MODULE)
    engine.add_messages_to_queue = flowers_loop = lambda *args: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, VCE_MODULE, engine)
    names = ("_run_id", "_node_id", "_task_id")
    identity = [getattr(TaskIdentity, name) for name in names]
    with caplog.at_level("WARNING"):
        flower_patches.shorten_supernode(supernode)
        flower_patches.shorten_grid_pull(fallback_s=1.0)
        flower_patches.set_heartbeat(heartbeat, interval_s=10)
        assert flower_patches.shorten_pickup() is False
        flower_patches.set_task_identity()()
    assert supernode.time is time and supernode.pull_objects is flowers_pull
    assert http_grid.pull_objects is flowers_pull
    assert heartbeat.HEARTBEAT_DEFAULT_INTERVAL == 30
    assert engine.add_messages_to_queue is flowers_loop
    assert [getattr(TaskIdentity, name) for name in names] == identity
    lines = [r.getMessage() for r in caplog.records if "stands aside" in r.getMessage()]
    assert len(lines) == len(PATCHES)
    for line, (name, patch) in zip(lines, PATCHES.items(), strict=True):
        assert line.startswith(f"edgeflex: flwr {UNTESTED} is untested"), line
        assert f" {name} stands aside" in line and patch.change in line and patch.without in line
    # short-polls is accepted: its patches stand aside where they run
    assert settings_with(short_polls=True).deployment.short_polls


def test_a_bad_value_is_refused_on_any_flower(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standing aside is no reason to accept a value the tested Flower would refuse."""
    monkeypatch.setattr(flower_patches.flwr, "__version__", UNTESTED)
    with pytest.raises(ValueError, match=r"heartbeat interval must be within \[10, 1800\]"):
        flower_patches.set_heartbeat(types.ModuleType("heartbeat"), interval_s=5)
    with pytest.raises(ValueError, match="idle poll must be within"):
        flower_patches.shorten_supernode(types.ModuleType("supernode"), idle_s=0.0)


def test_out_of_range_polls_are_refused(source: list[str]) -> None:
    module = _fake_supernode(source, "time.sleep(3) time.sleep(0.5) pull_objects(")
    with pytest.raises(ValueError, match="idle poll must be within"):
        flower_patches.shorten_supernode(module, idle_s=0.0)


def test_the_installed_flower_has_what_the_patches_replace() -> None:
    """The real modules (flwr 1.42 here): a Flower upgrade that moved them fails here first."""
    from flwr.superlink.grid import http_grid
    from flwr.supernode import start_client_internal

    real = flower_patches.inspect.getsource(start_client_internal)
    assert "time.sleep(3)" in real and "time.sleep(0.5)" in real and "pull_objects(" in real
    assert "pull_objects(" in flower_patches.inspect.getsource(http_grid)


def _fake_heartbeat_modules(source: list[str]) -> tuple[types.ModuleType, types.ModuleType]:
    source[0] = "... heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL ..."
    connection, sender = types.ModuleType("connection"), types.ModuleType("sender")
    for module in (connection, sender):
        module.HEARTBEAT_DEFAULT_INTERVAL = 30  # type: ignore[attr-defined]
    return connection, sender


@applies_here
def test_the_heartbeat_interval_is_announced_and_kept_within_flowers_bounds(
    source: list[str],
) -> None:
    connection, sender = _fake_heartbeat_modules(source)
    flower_patches.set_heartbeat(connection, sender, interval_s=10)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == sender.HEARTBEAT_DEFAULT_INTERVAL == 10
    for outside in (5, 3600):  # the SuperLink would refuse the node's activation
        with pytest.raises(ValueError, match=r"heartbeat interval must be within \[10, 1800\]"):
            flower_patches.set_heartbeat(connection, sender, interval_s=outside)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == 10
    source[0] = "no such name"
    with pytest.raises(ValueError, match="has no 'HEARTBEAT_DEFAULT_INTERVAL'"):
        flower_patches.set_heartbeat(connection, sender, interval_s=20)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == sender.HEARTBEAT_DEFAULT_INTERVAL == 10


def test_the_installed_flower_announces_and_beats_by_the_patched_name() -> None:
    from flwr.common.constant import HEARTBEAT_MAX_INTERVAL, HEARTBEAT_MIN_INTERVAL
    from flwr.supercore import heartbeat
    from flwr.supercore.corestate import in_memory_corestate
    from flwr.supernode import fleet_http_connection

    assert (HEARTBEAT_MIN_INTERVAL, HEARTBEAT_MAX_INTERVAL) == flower_patches.HEARTBEAT_RANGE_S
    for module in (fleet_http_connection, heartbeat, in_memory_corestate):
        assert "HEARTBEAT_DEFAULT_INTERVAL" in flower_patches.inspect.getsource(module)


@applies_here
def test_the_grid_waits_for_a_replys_late_objects_until_the_exchanges_deadline_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node killed between its reply and the reply's objects must not hold the round for
    the SuperLink's 180-s push session: Flower's own pull (retried every 10 ms) gives up at
    the deadline TimedGrid set, or after the fallback outside an exchange."""
    from flwr.supercore.inflatable.inflatable_utils import (
        ObjectPullError,
        ObjectUnavailableError,
    )
    from flwr.superlink.grid import http_grid

    monkeypatch.setattr(http_grid, "pull_objects", http_grid.pull_objects)  # restored after
    monkeypatch.setattr(flower_patches, "LATE_OBJECTS", flower_patches.LateObjects())
    flower_patches.shorten_grid_pull(fallback_s=0.2)
    flower_patches.shorten_grid_pull(fallback_s=99.0)  # once per process: the first one holds
    tries: list[float] = []

    def never_there(object_id: str) -> bytes:
        tries.append(time.monotonic())
        raise ObjectUnavailableError(object_id)

    for deadline_in_s, bound_s in ((None, 0.2), (0.5, 0.5), (-1.0, flower_patches.LAST_TRY_S)):
        tries.clear()
        began = time.monotonic()
        deadline = None if deadline_in_s is None else began + deadline_in_s
        with flower_patches.late_objects_until(deadline), pytest.raises(ObjectPullError):
            http_grid.pull_objects(["a" * 64], pull_object_fn=never_there)
        took = time.monotonic() - began
        assert bound_s <= took < bound_s + 0.5, (deadline_in_s, took)
        assert len(tries) >= 2 and tries[1] - tries[0] < 0.1  # a short back-off, not 1 s
    assert flower_patches.LATE_OBJECTS.deadline is None  # reset when the exchange ends


FLOWERS_LOOP = '''
def add_messages_to_queue(state, queue, nodes_mapping, f_stop):
    """Put Messages in the queue from the LinkState."""
    while not f_stop.is_set():
        for node_id in nodes_mapping.keys():
            message_ins_list = state.get_message_ins(node_id=node_id, limit=1)
            for msg in message_ins_list:
                queue.put(msg)
        f_stop.wait(0.1)
'''


def _engine_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> ModuleType:
    """A stand-in for vce_api, registered under its name (``inspect`` reads its file)."""
    name = f"fake_vce_api_{tmp_path.name.replace('-', '_')}"  # a fresh module per test
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    sys.modules.pop(name)
    monkeypatch.setitem(sys.modules, VCE_MODULE, module)
    return module


class _State:
    def __init__(self, messages: dict[int, list[str]]) -> None:
        self.messages = messages
        self.asked: list[int] = []

    def get_message_ins(self, node_id: int, limit: int) -> list[str]:
        self.asked.append(node_id)
        out, self.messages[node_id] = self.messages[node_id][:limit], self.messages[node_id][limit:]
        return out


class _StopAfter(threading.Event):
    """Stops the loop after ``loops`` waits and remembers how long each wait was asked to be."""

    def __init__(self, loops: int) -> None:
        super().__init__()
        self.loops = loops
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waits.append(timeout)
        if len(self.waits) >= self.loops:
            self.set()
        return self.is_set()


def test_nothing_is_patched_in_a_process_without_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, VCE_MODULE, raising=False)
    assert shorten_pickup() is False


class _Clock:
    """Stands in for the ``time`` module: each reading is ``step_s`` later than the last."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s = 0.0, step_s

    def monotonic(self) -> float:
        self.now += self.step_s
        return self.now


@applies_here
@pytest.mark.parametrize(
    ("lookup_s", "wait_s"),
    [(0.0001, PICKUP_S), (0.01, 0.02)],  # quick lookups: the short wait; slow: twice theirs
)
def test_the_replacement_does_the_same_lookups_and_waits_the_short_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lookup_s: float, wait_s: float
) -> None:
    module = _engine_module(tmp_path, monkeypatch, FLOWERS_LOOP)
    assert shorten_pickup() is True
    patched = module.add_messages_to_queue
    assert patched.edgeflex_pickup_s == PICKUP_S
    assert shorten_pickup() is True and module.add_messages_to_queue is patched  # once

    monkeypatch.setattr(flower_patches, "time", _Clock(lookup_s))
    state = _State({1: ["a", "b"], 2: ["c"]})
    queue: list[Any] = []
    stop = _StopAfter(loops=2)
    patched(state, type("Q", (), {"put": queue.append})(), {1: 0, 2: 1}, stop)
    assert queue == ["a", "c", "b"]  # one message per node and pass, as Flower's loop
    assert state.asked == [1, 2, 1, 2]
    assert stop.waits == pytest.approx([wait_s, wait_s])


@applies_here
def test_a_changed_flower_function_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _engine_module(tmp_path, monkeypatch, FLOWERS_LOOP.replace("0.1)", "0.05)"))
    original = module.add_messages_to_queue
    assert shorten_pickup() is False
    assert module.add_messages_to_queue is original


@applies_here
def test_a_loop_already_running_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _engine_module(tmp_path, monkeypatch, FLOWERS_LOOP)
    stop = threading.Event()
    running = threading.Thread(
        target=module.add_messages_to_queue,
        args=(_State({1: []}), None, {1: 0}, stop),
        daemon=True,
    )
    running.start()
    try:
        assert shorten_pickup() is False  # patched, but the running thread keeps 0.1 s
    finally:
        stop.set()
        running.join(timeout=5)


def test_flowers_own_function_is_the_one_read() -> None:
    """The real engine module (flwr 1.42) still has the loop the replacement copies."""
    vce_api = importlib.import_module(VCE_MODULE)
    function = vce_api.add_messages_to_queue
    source = flower_patches.inspect.getsource(getattr(function, "edgeflex_replaced", function))
    for snippet in flower_patches.REPLACED_SOURCE:
        assert snippet in source


@applies_here
def test_set_task_identity_sets_and_puts_back() -> None:
    from flwr.supercore.task_identity import TaskIdentity

    before = TaskIdentity._run_id  # type: ignore[attr-defined]
    restore = flower_patches.set_task_identity()
    assert (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id) == (1, 1, 1)  # type: ignore[attr-defined]
    restore()
    assert TaskIdentity._run_id == before  # type: ignore[attr-defined]


class _Metadata:
    def __init__(self, node: int) -> None:
        self.dst_node_id, self.delivered_at = node, ""


class _Stored:
    def __init__(self, node: int) -> None:
        self.metadata = _Metadata(node)


class _LinkState:
    """The parts of flwr 1.42's InMemoryLinkState that ``first_undelivered`` reads."""

    def __init__(self, nodes: list[int], expired: set[str]) -> None:
        self.lock = threading.RLock()
        self.message_ins_store = {f"m{i}": _Stored(n) for i, n in enumerate(nodes)}
        self.expired = expired

    def _check_stored_messages(self, ids: set[str]) -> None:
        for msg_id in ids & self.expired:
            self.message_ins_store.pop(msg_id, None)


def test_one_pass_gives_each_node_its_first_undelivered_message_and_marks_it() -> None:
    state = _LinkState([5, 6, 5, 7, 6, 9], expired={"m1"})  # m1 (node 6) has expired
    state.message_ins_store["m0"].metadata.delivered_at = "earlier"  # node 5's first is out
    picked = flower_patches.first_undelivered(state, {5, 6, 7})  # node 9 is not the engine's
    ids = {id(m): k for k, m in state.message_ins_store.items()}
    assert [ids[id(m)] for m in picked] == ["m2", "m3", "m4"]
    assert all(m.metadata.delivered_at not in ("", "earlier") for m in picked)
    assert "m1" not in state.message_ins_store
    assert flower_patches.first_undelivered(state, {5, 6, 7}) == []  # each went once


def test_the_one_pass_reads_what_flowers_lookup_reads() -> None:
    from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

    source = inspect.getsource(InMemoryLinkState.get_message_ins)
    assert [s for s in flower_patches.GET_MESSAGE_INS_SOURCE if s not in source] == []
    assert flower_patches.reads_in_one_pass(_LinkState([], set())) is False  # not Flower's
