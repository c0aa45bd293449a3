import pytest
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture
def task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Message() reads the run, node and task identity, which only a running federation sets."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 1)
    monkeypatch.setattr(TaskIdentity, "_task_id", 1)
