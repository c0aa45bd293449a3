"""The simulation engine's message pickup: patched only where the engine is, only when Flower's
function is the one read, and the replacement does the same lookups with a shorter wait."""

import importlib
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from common import simulation_pickup
from common.simulation_pickup import PICKUP_S, VCE_MODULE, shorten_pickup

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

    monkeypatch.setattr(simulation_pickup, "time", _Clock(lookup_s))
    state = _State({1: ["a", "b"], 2: ["c"]})
    queue: list[Any] = []
    stop = _StopAfter(loops=2)
    patched(state, type("Q", (), {"put": queue.append})(), {1: 0, 2: 1}, stop)
    assert queue == ["a", "c", "b"]  # one message per node and pass, as Flower's loop
    assert state.asked == [1, 2, 1, 2]
    assert stop.waits == pytest.approx([wait_s, wait_s])


def test_a_changed_flower_function_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _engine_module(tmp_path, monkeypatch, FLOWERS_LOOP.replace("0.1)", "0.05)"))
    original = module.add_messages_to_queue
    assert shorten_pickup() is False
    assert module.add_messages_to_queue is original


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
    source = simulation_pickup.inspect.getsource(getattr(function, "edgeflex_replaced", function))
    for snippet in simulation_pickup.REPLACED_SOURCE:
        assert snippet in source
