from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from common.flower_patches import set_task_identity

if TYPE_CHECKING:  # commands.broker imports the launchers' modules: only the MQTT tests pay
    from wire.stream_samples import BrokerAddress


@pytest.fixture(autouse=True)
def no_ray_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulations start their own Ray: a developer's RAY_ADDRESS is not the tests' (the Ray
    cluster test sets its own)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Message() reads the run, node and task identity, which only a running federation sets."""
    restore = set_task_identity()
    yield
    restore()


REQUIRE = "EDGEFLEX_REQUIRE_SYSTEM_PACKAGES"


def require_system_package(found: str | None, missing: str) -> None:
    """Skip the test when a system package is not installed (``make venv`` installs it as
    root with apt-get), except where EDGEFLEX_REQUIRE_SYSTEM_PACKAGES=1 (CI): fail then."""
    if found is not None:
        return
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{missing}, and {REQUIRE}=1 forbids skipping")
    pytest.skip(f"{missing}: skipped")


@pytest.fixture(scope="session")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerAddress]:
    """A mosquitto of the session's own on a free loopback port."""
    from commands.broker import MISSING, local_broker, mosquitto_path

    require_system_package(mosquitto_path(), MISSING)
    with local_broker(tmp_path_factory.mktemp("mosquitto")) as address:
        yield address


@pytest.fixture
def nginx() -> None:
    """nginx installed, for the fleet gate (commands/fleet_gate.py)."""
    from commands.fleet_gate import MISSING, nginx_path

    require_system_package(nginx_path(), MISSING)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the session's mosquitto or nginx starts a process: it is slow."""
    for item in items:
        if {"mqtt_broker", "nginx"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The Hugging Face Hub unreachable (its endpoint a closed loopback port) and an empty
    datasets cache: what a machine without network sees, without touching the network."""
    import datasets.config
    import huggingface_hub.constants

    from commands.run import free_port

    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("hf"))


@pytest.fixture
def no_superlink(monkeypatch: pytest.MonkeyPatch) -> None:
    """commands.run may not start a SuperLink: a bad configuration fails before it."""
    from commands import run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a SuperLink was started for a bad configuration")

    monkeypatch.setattr(run, "local_superlink", refuse)
