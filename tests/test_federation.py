"""A SuperLink and 3 SuperNodes on loopback, each its own process (Flower's deployment runtime).

Slow by nature: Flower starts a fresh ClientApp process per message and a SuperNode polls
every 3 s, so a round costs about 10 s here. The insecure federation of edge agents with
short polls and MQTT is tests/test_agents.py; the crash test below runs insecure too.
"""

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commands import federation as run_federation
from commands.run import FLWR_DIR
from commands.run_config import parse_overrides, resolve_settings
from common.rates import client_rate
from common.settings import PROJECT_ROOT
from server.records import read_rounds
from tests.helpers import (
    FEDERATION_TIMEOUT_S,
    REQUIRED_ROUND_FIELDS,
    nothing_left,
    processes_with_env,
    wait_for_rounds,
)

# Compressed (Top-k at c = 0.1 every round) training on streaming clients at S1-normal rates.
pytestmark = pytest.mark.slow  # starts processes


STREAMING_TOPK = (
    "configs/scadles.toml adaptive-delta=0 num-clients=3 num-server-rounds=2 seed=5 "
    "round-timeout-s=120"
)


def _check_measured_rounds(rows: list[dict[str, object]], rounds: int) -> None:
    assert [r["round"] for r in rows] == list(range(1, rounds + 1))
    rates = sum(client_rate("S1-normal", i, 3, 5, 0) for i in range(3))
    for row in rows:
        assert set(row) >= REQUIRED_ROUND_FIELDS
        assert row["time_source"] == "measured" and row["failed"] == []
        assert row["num_clients"] == 3
        assert row["compression_ratio"] == 0.1 and row["collective"] == "allgather"
        assert row["bytes_up"] < 3 * 4 * 50_826 / 3  # a tenth of the values, plus indices
        (phase,) = row["phases"]  # type: ignore[misc]
        # Measured parts of a real exchange: each positive, and together the phase (the
        # server sees a reply at its next poll, 0.1 s; the client stamps are rounded too).
        for part in ("download_s_max", "busy_s_max", "upload_s_max", "train_s_max"):
            assert phase[part] > 0
        assert phase["train_s_max"] <= phase["busy_s_max"]
        parts = phase["download_s_max"] + phase["busy_s_max"] + phase["upload_s_max"]
        assert 0.5 * parts <= phase["duration_s"] <= parts + 0.5
        assert row["round_time_s"] == phase["duration_s"]
        # The rates come from each SuperNode's --node-config.
        stream = row["stream"]
        assert isinstance(stream, dict)
        assert abs(stream["rate_total"] - rates) < 1e-6
    assert rows[1]["virtual_time_s"] > rows[0]["virtual_time_s"] > 0


@pytest.mark.usefixtures("nginx", "mqtt_broker")  # the agents' wake-ups need mosquitto
def test_localhost_federation_of_agents_with_tls_and_supernode_auth(tmp_path: Path) -> None:
    overrides = parse_overrides(f"{STREAMING_TOPK} results-dir={tmp_path / 'run'}")
    code, results = run_federation.run(
        overrides,
        tls=True,
        runtime=run_federation.NodeRuntime(agents=True),
        timeout_s=FEDERATION_TIMEOUT_S,
    )
    assert code == 0, (results / "superlink.log").read_text()[-3000:]
    _check_measured_rounds(read_rounds(results), 2)
    assert sorted(p.name for p in results.glob("agent-*.log")) == [
        "agent-0.log",
        "agent-1.log",
        "agent-2.log",
    ]
    # Each node's key was registered before it connected, and all three authenticated,
    # through the fleet gate (commands/fleet_gate.py): the Control API was not in their reach.
    log = (results / "superlink.log").read_text()
    assert log.count("/v1/fleet/activate-node") >= 3
    gate_log = (results / "gate-access.log").read_text()
    assert gate_log.count('POST /v1/fleet/activate-node HTTP/1.1" 200') >= 3
    assert "/v1/control/" not in gate_log
    assert nothing_left()


def test_a_crashed_supernode_does_not_stop_the_federation_and_resyncs(tmp_path: Path) -> None:
    results = tmp_path / "run"
    # Flower's SuperNodes (a ClientApp process per message; agents are tests/test_agents.py);
    # a 10-s heartbeat: the SuperLink drops the dead node after 20 s.
    runtime = run_federation.NodeRuntime(short_polls=True, heartbeat_s=10)
    overrides = run_federation.deployment_overrides(
        parse_overrides(
            "collective=allgather compression-ratio=0.1 num-clients=3 num-server-rounds=5 seed=5 "
            f"min-clients=2 round-timeout-s=20 results-dir={results}"
        ),
        runtime,
    )
    codes: list[int] = []
    with run_federation.local_federation(
        resolve_settings(overrides), results, runtime=runtime
    ) as federation:
        runner = threading.Thread(
            target=lambda: codes.append(
                federation.run_app(overrides, timeout_s=FEDERATION_TIMEOUT_S)
            )
        )
        runner.start()
        wait_for_rounds(results / "rounds.jsonl", 1, runner)
        federation.crash_node(2)  # SIGKILL: no goodbye to the SuperLink
        crashed_after = len(read_rounds(results))  # the round under way may have had its reply
        federation.start_node(2)  # the device reboots: a new node, with empty state
        runner.join(FEDERATION_TIMEOUT_S)
    assert codes == [0], (results / "superlink.log").read_text()[-3000:]
    rows = read_rounds(results)
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["num_clients"] == 3 and rows[0]["failed"] == []
    # The round under way at the kill, or at the latest the next one, went on with the other
    # two (weights renormalised over them); the loss is recorded.
    lost = [i for i, r in enumerate(rows) if r["num_clients"] == 2]
    assert lost and lost[0] in (crashed_after, crashed_after + 1), [r["failed"] for r in rows]
    (failure,) = rows[lost[0]]["failed"]  # type: ignore[misc]
    assert "(partition 2)" in failure
    # Once the SuperLink has dropped the old node (twice the heartbeat interval after the kill:
    # until then the partition belongs to it), partition 2 trains again on the new node, from
    # a full model (a new node holds no replica).
    back = [r for r in rows[lost[0] + 1 :] if r["num_clients"] == 3]
    assert back, [r["failed"] for r in rows]
    assert back[0]["model_payloads"]["full"] >= 1  # type: ignore[index]
    assert (results / "summary.json").exists()
    assert nothing_left()


def test_ctrl_c_stops_the_superlink_and_every_supernode(tmp_path: Path) -> None:
    results = tmp_path / "interrupted"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands.federation",
            "--short-polls",  # the first round ends sooner; stopping is the same
            "--run-config",
            f"num-clients=2 num-server-rounds=100 results-dir={results}",
        ],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + FEDERATION_TIMEOUT_S
        rounds = results / "rounds.jsonl"
        while not (rounds.exists() and rounds.read_text().strip()):  # mid-run, nodes busy
            assert proc.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline, "no round finished"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130
    assert not (results / "summary.json").exists()
    assert processes_with_env("FLWR_HOME", str(FLWR_DIR / f"federation-{proc.pid}-")) == []
