"""short-polls: what it patches, and that it refuses a Flower it was not read against."""

from __future__ import annotations

import time
import types

import pytest

from common import flower_polls
from common.settings import ConfigError, settings_with


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What Flower's module source reads as (set by each test)."""
    text = [""]
    monkeypatch.setattr(flower_polls.inspect, "getsource", lambda module: text[0])
    return text


def _fake_supernode(source: list[str], text: str) -> types.ModuleType:
    source[0] = text
    module = types.ModuleType("fake_supernode")
    module.pull_objects = lambda ids, **kw: kw  # type: ignore[attr-defined]
    module.time = None  # type: ignore[attr-defined]
    return module


def test_the_supernode_sleeps_are_shortened_and_pulls_back_off_briefly(
    monkeypatch: pytest.MonkeyPatch, source: list[str]
) -> None:
    module = _fake_supernode(source, "time.sleep(3) ... time.sleep(0.5) ... pull_objects(")
    flower_polls.shorten_supernode(module, idle_s=0.2, reply_s=0.05)
    slept: list[float] = []
    monkeypatch.setattr(flower_polls.time, "sleep", slept.append)
    module.time.sleep(3)
    module.time.sleep(0.5)
    module.time.sleep(7)
    assert slept == [0.2, 0.05, 7]  # only Flower's two constants change
    assert module.pull_objects(["a"]) == {"initial_backoff": 0.01, "backoff_cap": 0.5}
    assert module.time.monotonic is flower_polls.time.monotonic


def test_a_changed_flower_source_is_not_patched(source: list[str]) -> None:
    module = _fake_supernode(source, "time.sleep(2) pull_objects(")
    with pytest.raises(ValueError, match=r"has no 'time.sleep\(3\)'"):
        flower_polls.shorten_supernode(module)
    assert module.time is None


def test_another_flower_version_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="flwr 1.42.x only; this is flwr 1.43.0"):
        flower_polls.check_flower("1.43.0")
    monkeypatch.setattr(flower_polls.flwr, "__version__", "1.43.0")
    with pytest.raises(ConfigError, match="short-polls: .*1.43.0"):
        settings_with(short_polls=True)
    assert not settings_with(short_polls=False).short_polls


def test_out_of_range_polls_are_refused(source: list[str]) -> None:
    module = _fake_supernode(source, "time.sleep(3) time.sleep(0.5) pull_objects(")
    with pytest.raises(ValueError, match="idle poll must be within"):
        flower_polls.shorten_supernode(module, idle_s=0.0)


def test_the_installed_flower_has_what_the_patches_replace() -> None:
    """The real modules (flwr 1.42 here): a Flower upgrade that moved them fails here first."""
    from flwr.superlink.grid import http_grid
    from flwr.supernode import start_client_internal

    real = flower_polls.inspect.getsource(start_client_internal)
    assert "time.sleep(3)" in real and "time.sleep(0.5)" in real and "pull_objects(" in real
    assert "pull_objects(" in flower_polls.inspect.getsource(http_grid)


def _fake_heartbeat_modules(source: list[str]) -> tuple[types.ModuleType, types.ModuleType]:
    source[0] = "... heartbeat_interval=HEARTBEAT_DEFAULT_INTERVAL ..."
    connection, sender = types.ModuleType("connection"), types.ModuleType("sender")
    for module in (connection, sender):
        module.HEARTBEAT_DEFAULT_INTERVAL = 30  # type: ignore[attr-defined]
    return connection, sender


def test_the_heartbeat_interval_is_announced_and_kept_within_flowers_bounds(
    source: list[str],
) -> None:
    connection, sender = _fake_heartbeat_modules(source)
    flower_polls.set_heartbeat(connection, sender, interval_s=10)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == sender.HEARTBEAT_DEFAULT_INTERVAL == 10
    for outside in (5, 3600):  # the SuperLink would refuse the node's activation
        with pytest.raises(ValueError, match=r"heartbeat interval must be within \[10, 1800\]"):
            flower_polls.set_heartbeat(connection, sender, interval_s=outside)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == 10
    source[0] = "no such name"
    with pytest.raises(ValueError, match="has no 'HEARTBEAT_DEFAULT_INTERVAL'"):
        flower_polls.set_heartbeat(connection, sender, interval_s=20)
    assert connection.HEARTBEAT_DEFAULT_INTERVAL == sender.HEARTBEAT_DEFAULT_INTERVAL == 10


def test_the_installed_flower_announces_and_beats_by_the_patched_name() -> None:
    from flwr.common.constant import HEARTBEAT_MAX_INTERVAL, HEARTBEAT_MIN_INTERVAL
    from flwr.supercore import heartbeat
    from flwr.supercore.corestate import in_memory_corestate
    from flwr.supernode import fleet_http_connection

    assert (HEARTBEAT_MIN_INTERVAL, HEARTBEAT_MAX_INTERVAL) == flower_polls.HEARTBEAT_RANGE_S
    for module in (fleet_http_connection, heartbeat, in_memory_corestate):
        assert "HEARTBEAT_DEFAULT_INTERVAL" in flower_polls.inspect.getsource(module)


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
    monkeypatch.setattr(flower_polls, "LATE_OBJECTS", flower_polls.LateObjects())
    flower_polls.shorten_grid_pull(fallback_s=0.2)
    flower_polls.shorten_grid_pull(fallback_s=99.0)  # once per process: the first one holds
    tries: list[float] = []

    def never_there(object_id: str) -> bytes:
        tries.append(time.monotonic())
        raise ObjectUnavailableError(object_id)

    for deadline_in_s, bound_s in ((None, 0.2), (0.5, 0.5), (-1.0, flower_polls.LAST_TRY_S)):
        tries.clear()
        began = time.monotonic()
        deadline = None if deadline_in_s is None else began + deadline_in_s
        with flower_polls.late_objects_until(deadline), pytest.raises(ObjectPullError):
            http_grid.pull_objects(["a" * 64], pull_object_fn=never_there)
        took = time.monotonic() - began
        assert bound_s <= took < bound_s + 0.5, (deadline_in_s, took)
        assert len(tries) >= 2 and tries[1] - tries[0] < 0.1  # a short back-off, not 1 s
    assert flower_polls.LATE_OBJECTS.deadline is None  # reset when the exchange ends
