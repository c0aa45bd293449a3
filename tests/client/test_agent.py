"""The edge agent's own checks (its runs against a real SuperNode are in tests/test_agents.py)."""

from __future__ import annotations

import pytest
from flwr.supercore.run import Run

from client.agent import APP_ID, check_app, installed_version, main


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
        (["--mqtt", "127.0.0.1:1883"], "--mqtt needs --partition-id"),
        (["--mqtt", "localhost", "--partition-id", "0"], "is not host:port"),
        (["--poll-s", "0", "--no-superexec-auth"], "--poll-s must be within"),
        ([], "give --superexec-auth-secret-file (the SuperNode's), or --no-superexec-auth"),
        (
            ["--superexec-auth-secret-file", "s", "--no-superexec-auth"],
            "give --superexec-auth-secret-file",
        ),
    ],
)
def test_bad_arguments_stop_the_agent_before_it_starts(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
