"""The edge agent's own parts (its runs against a real SuperLink are in tests/test_agents.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.run import Run

from client.agent import main, serve
from client.device_state import KEY_FILE, STATE_SUFFIX, DeviceState
from client.node_loop import APP_ID, Node, check_app, installed_version
from common.wake_ups import node_topic, run_topic
from state.vectors import load_vector
from wire.codec import raw_array


def _run(fab_id: str, fab_version: str) -> Run:
    return Run(
        run_id=1,
        fab_id=fab_id,
        fab_version=fab_version,
        fab_hash="h",
        override_config={},
        pending_at="",
        starting_at="",
        running_at="",
        finished_at="",
        status=None,  # type: ignore[arg-type]
        flwr_aid="",
        federation_id="",
        primary_task_id=None,
        bytes_sent=0,
        bytes_recv=0,
        clientapp_runtime=0.0,
    )


def test_the_agent_runs_only_its_own_app_at_its_own_version() -> None:
    check_app(_run(APP_ID, installed_version()))
    with pytest.raises(RuntimeError, match="this agent runs edgeflex/edgeflex, the run's app is"):
        check_app(_run("someone/else", installed_version()))
    with pytest.raises(RuntimeError, match="0.0.1, this agent has .* installed"):
        check_app(_run(APP_ID, "0.0.1"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--insecure", "--mqtt", "127.0.0.1:1883"], "--mqtt needs partition-id=N (N >= 0)"),
        (
            ["--insecure", "--mqtt", "127.0.0.1:1883", "--node-config", "partition-id=-1"],
            "--mqtt needs partition-id=N (N >= 0)",
        ),
        (["--insecure", "--mqtt", "localhost", "--node-config", "partition-id=0"], "host:port"),
        (
            ["--insecure", "--node-config", "partition-id=0 num-partitions=3 partition-id=1"],
            "--node-config names partition-id more than once",
        ),
        (["--insecure", "--node-config", "partition-id=0x"], "--node-config 'partition-id=0x'"),
        (["--insecure", "--wake-broker", "nowhere"], "is not host:port"),
        (["--insecure", "--idle-poll-s", "0"], "--idle-poll-s must be within"),
        (["--insecure", "--heartbeat-interval-s", "5"], "heartbeat interval must be within"),
        ([], "give --root-certificates (TLS) or --insecure"),
        (["--insecure", "--root-certificates", "ca.crt"], "give --root-certificates (TLS) or"),
        (["--insecure", "--node-config", "partition-id"], "is not 'key=value ...'"),
    ],
)
def test_bad_arguments_stop_the_agent_before_it_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_device_keeps_its_key_node_id_and_state_across_restarts(tmp_path: Path) -> None:
    device = DeviceState(tmp_path)
    private, public = device.own_keys()  # type: ignore[misc]
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    again = DeviceState(tmp_path).own_keys()  # the next start: the same key
    assert again is not None and again[1].public_numbers() == public.public_numbers()
    assert device.last_node_id() is None
    device.note_node_id(1234)
    assert DeviceState(tmp_path).last_node_id() == 1234
    state = RecordDict(
        {
            "replica": ArrayRecord({"vector": raw_array(np.arange(3, dtype=np.float32))}),
            "replica-meta": ConfigRecord({"model-version": 7}),
        }
    )
    device.save(5, state)
    back = DeviceState(tmp_path).load(5)
    np.testing.assert_array_equal(load_vector(back, "replica"), np.arange(3))  # type: ignore[arg-type]
    assert back["replica-meta"]["model-version"] == 7
    assert len(DeviceState(tmp_path).load(6)) == 0  # another run starts empty
    # Without a directory nothing is kept, and the connection makes a key per start.
    assert DeviceState().own_keys() is None and len(DeviceState().load(5)) == 0


@dataclass
class FakeConnection:
    node_id: int
    queue: list[object]
    polls: int = 0

    def receive(self) -> tuple[Message, object] | None:
        self.polls += 1
        return self.queue.pop(0) if self.queue else None  # type: ignore[return-value]


class FakeWakeUps:
    def __init__(self) -> None:
        self.woken = threading.Event()
        self.listened: list[str] = []
        self.woke: list[str] = []

    def listen(self, topic: str) -> None:
        self.listened.append(topic)

    def wake(self, topic: str) -> None:
        self.woke.append(topic)

    def wait(self, timeout_s: float) -> bool:
        return self.woken.wait(timeout_s)


@pytest.mark.usefixtures("task_identity")
def test_the_node_polls_once_per_wake_up_and_wakes_the_run_after_each_reply() -> None:
    message = Message(RecordDict(), dst_node_id=9, message_type="train")
    connection = FakeConnection(node_id=9, queue=[(message, "tree"), (message, "tree")])
    stop, wake_ups = threading.Event(), FakeWakeUps()
    handled: list[object] = []

    def handle(msg: Message, tree: object) -> None:
        handled.append(tree)
        if len(handled) == 1:
            wake_ups.woken.set()  # the next message was pushed while this one ran
        else:
            stop.set()

    node = SimpleNamespace(connection=connection, handle=handle)
    assert serve(node, stop, wake_ups, idle_poll_s=5.0) == 2  # type: ignore[arg-type]
    assert wake_ups.listened == [node_topic(9)]
    assert wake_ups.woke == [run_topic(message.metadata.run_id)] * 2
    assert connection.polls == 2  # no empty poll between the two messages


def test_the_agent_refuses_a_flower_its_node_loop_was_not_read_against(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent follows flwr 1.42's SuperNode loop and calls its connection code: another
    Flower stops it before it connects, saying which."""
    import flwr

    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    with pytest.raises(SystemExit) as exit_info:
        main(["--insecure"])
    assert exit_info.value.code == 2
    assert "edgeflex-agent follows flwr 1.42.x only; this is flwr 1.43.0" in capsys.readouterr().err


@dataclass
class RecordingConnection:
    """What a node needs of Flower's connection to refuse a run: the run, and a send."""

    node_id: int = 9
    run: Run = field(default_factory=lambda: _run("someone/else", "1.0"))
    runs_asked: int = 0
    sent: list[Message] = field(default_factory=list)

    def get_run(self, run_id: int) -> Run:
        self.runs_asked += 1
        return self.run

    def send(self, message: Message, tree: object, took_s: float) -> tuple[set[str], str]:
        self.sent.append(message)
        return set(), "session"


@pytest.mark.usefixtures("task_identity")
def test_a_run_of_another_app_is_answered_with_an_error_and_asked_about_once() -> None:
    connection = RecordingConnection()
    node = Node(connection, app=None, node_config={})  # type: ignore[arg-type]
    for _ in range(2):
        message = Message(RecordDict(), dst_node_id=9, message_type="train")
        message.metadata.__dict__["_message_id"] = "m" * 64
        node.handle(message, tree=None)  # type: ignore[arg-type]
    assert connection.runs_asked == 1  # the refusal is remembered
    assert len(connection.sent) == 2  # each message answered: the server need not wait
    for reply in connection.sent:
        assert reply.has_error()
        assert "this agent runs edgeflex/edgeflex, the run's app is 'someone/else'" in (
            reply.error.reason
        )


def test_a_state_file_that_is_not_a_state_is_set_aside_for_an_empty_one(tmp_path: Path) -> None:
    (tmp_path / f"3{STATE_SUFFIX}").write_bytes(b"\xff\xff not a state file")
    assert len(DeviceState(tmp_path).load(3)) == 0
    DeviceState(tmp_path).save(4, RecordDict({"stream": ConfigRecord({"clock-s": 1.0})}))
    DeviceState(tmp_path).forget_runs_but(4)  # a new run: the old run's state goes
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"4{STATE_SUFFIX}"]
