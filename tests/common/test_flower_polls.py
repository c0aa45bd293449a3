"""short-polls: what it patches, and that it refuses a Flower it was not read against."""

from __future__ import annotations

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
