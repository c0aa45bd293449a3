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


MOSQUITTO_MISSING = "mosquitto not installed (make venv installs it as root with apt-get)"


@pytest.fixture(scope="session")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerAddress]:
    """A mosquitto of the session's own on a free loopback port. Without mosquitto the MQTT
    tests skip, except where EDGEFLEX_REQUIRE_MOSQUITTO=1 (CI), where they fail."""
    from scripts.broker import local_broker, mosquitto_path

    if mosquitto_path() is None:
        if os.environ.get("EDGEFLEX_REQUIRE_MOSQUITTO") == "1":
            pytest.fail(f"{MOSQUITTO_MISSING}, and EDGEFLEX_REQUIRE_MOSQUITTO=1 forbids skipping")
        pytest.skip(f"{MOSQUITTO_MISSING}: MQTT tests skipped")
    with local_broker(tmp_path_factory.mktemp("mosquitto")) as address:
        yield address
