from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from flwr.supercore.task_identity import TaskIdentity

if TYPE_CHECKING:  # scripts.broker imports the launchers' modules: only the MQTT tests pay
    from wire.stream_samples import BrokerAddress


@pytest.fixture
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Message() reads the run, node and task identity, which only a running federation sets."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)


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
    from scripts.broker import MISSING, local_broker, mosquitto_path

    require_system_package(mosquitto_path(), MISSING)
    with local_broker(tmp_path_factory.mktemp("mosquitto")) as address:
        yield address


@pytest.fixture
def nginx() -> None:
    """nginx installed, for the fleet gate (scripts/fleet_gate.py)."""
    from scripts.fleet_gate import MISSING, nginx_path

    require_system_package(nginx_path(), MISSING)
