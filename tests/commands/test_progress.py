"""The run's terminal: a progress bar fed by the ServerApp's round lines, errors shown, every
line kept in the log."""

import io

from rich.console import Console

from commands.progress import FIRST_PHASE, RunOutput, is_alarm, startup_phase
from server.records import parse_progress_line, progress_line

ROW = {
    "round": 7,
    "accuracy": 0.9125,
    "loss": 0.31,
    "virtual_time_s": 12.345,
    "bytes_up": 1_500_000,
    "bytes_down": 500_000,
}
INFO = "\x1b[92mINFO \x1b[0m:      "


def test_a_round_line_reads_back_as_its_figures() -> None:
    parsed = parse_progress_line(f"{INFO}edgeflex: {progress_line(ROW, 150)}")
    assert parsed == {
        "round": 7,
        "rounds": 150,
        "accuracy": 0.9125,
        "loss": 0.31,
        "virtual_time_s": 12.35,
        "megabytes": 2.0,
    }
    assert parse_progress_line(f"{INFO}edgeflex: done: final accuracy 0.9") is None


def test_lines_go_to_the_log_errors_to_the_terminal_rounds_to_the_bar() -> None:
    log, screen = io.BytesIO(), io.StringIO()
    lines = [
        f"{INFO}Starting Flower Simulation\n",
        f"{INFO}edgeflex: {progress_line(ROW, 150)}\n",
        f"{INFO}edgeflex: {progress_line(ROW | {'round': 8}, 150)}\n",
        "\x1b[91mERROR \x1b[0m:     ServerApp raised an exception\n",
        "Traceback (most recent call last):\n",
    ]
    with RunOutput(log, 150, console=Console(file=screen, width=120)) as output:
        for line in lines:
            output.feed(line.encode())
    assert log.getvalue().decode() == "".join(lines)
    assert output.rounds == 8 and output.megabytes == 4.0
    shown = screen.getvalue()
    assert "ServerApp raised an exception" in shown and "Traceback" in shown
    assert "Starting Flower Simulation" not in shown


def test_verbose_shows_every_line() -> None:
    screen = io.StringIO()
    with RunOutput(io.BytesIO(), 3, verbose=True, console=Console(file=screen)) as output:
        output.feed(f"{INFO}Starting Flower Simulation\n".encode())
    assert "Starting Flower Simulation" in screen.getvalue()


def test_what_counts_as_an_error_line() -> None:
    assert is_alarm("\x1b[91mERROR \x1b[0m:     boom")
    assert is_alarm("ValueError: bad reply")
    assert not is_alarm(f"{INFO}edgeflex: round 1/3")
    assert not is_alarm("\x1b[93mWARNING \x1b[0m:   fraction_evaluate is set to 0.0.")


def test_the_bar_names_the_start_up_phases_until_round_1() -> None:
    lines = [
        "Using SuperLink: edgeflex-local (127.0.0.1:5000)",
        "Successfully started run 56",
        f"{INFO}Starting Flower Simulation",
        f"{INFO}edgeflex: dense, model mlp (50826 parameters), 3 clients, records in /tmp/x",
    ]
    phases = []
    screen = io.StringIO()
    with RunOutput(io.BytesIO(), 6, console=Console(file=screen, width=150)) as output:
        phases.append(output.phase)
        for line in lines:
            output.feed(f"{line}\n".encode())
            phases.append(output.phase)
        output.feed(f"{INFO}edgeflex: {progress_line(ROW | {'round': 1}, 6)}\n".encode())
    assert phases == [
        FIRST_PHASE,
        FIRST_PHASE,
        "starting the simulation",
        "starting Ray and the ServerApp",
        "round 1: starting the client actors",
    ]
    assert output.rounds == 1
    # A comparison reads the phase from a run's log so far.
    assert startup_phase("\n".join(lines[:3])) == "starting Ray and the ServerApp"
    assert startup_phase("") == FIRST_PHASE
