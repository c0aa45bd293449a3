"""One progress bar for a run, fed by the lines Flower streams; the lines go to a log file.

The ServerApp logs one ``edgeflex: round ...`` line per round (``server.records.progress_line``);
``RunOutput`` turns each into the bar's round, accuracy, virtual time and megabytes, writes
every line to the run's log, and shows on the terminal what must be seen: error lines as they
come (and everything with ``verbose``).
"""

from __future__ import annotations

import re
import sys
from types import TracebackType
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from server.records import parse_progress_line

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Flower's level names open its log lines; a Python traceback or an exit message opens others.
_ALARM = re.compile(r"^\s*(ERROR|CRITICAL)\b|^Traceback |Error: |^\s*\w+(Error|Exception)\b")


# What a run does before round 1 (half a minute on two cores), named by the first line Flower
# prints at each step; the last one seen is the phase. Round 1 includes the client actors'
# start (Ray starts them when the first messages come).
STARTUP_PHASES = (
    ("Successfully started run", "starting the simulation"),
    ("Starting Flower Simulation", "starting Ray and the ServerApp"),
    ("records in ", "round 1: starting the client actors"),
)
FIRST_PHASE = "submitting the run"


def startup_phase(lines: str, phase: str = FIRST_PHASE) -> str:
    """The phase after ``lines`` (output so far, or one new line) of a run in ``phase``."""
    for marker, after in STARTUP_PHASES:
        if marker in lines:
            phase = after
    return phase


def plain(line: str) -> str:
    return _ANSI.sub("", line)


def is_alarm(line: str) -> bool:
    """An error line: it reaches the terminal even without ``--verbose``."""
    return bool(_ALARM.search(plain(line)))


class RunOutput:
    """Context manager: ``feed`` each output line of a run."""

    def __init__(
        self,
        log: IO[bytes],
        num_rounds: int,
        *,
        verbose: bool = False,
        console: Console | None = None,
    ) -> None:
        self.log = log
        self.verbose = verbose
        self.console = console or Console(file=sys.stdout)
        self.rounds = 0
        self.megabytes = 0.0  # both ways, over the rounds this process saw
        self.last: dict[str, Any] | None = None
        self._progress = Progress(
            TextColumn("round"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            disable=verbose,  # the lines themselves show the progress
        )
        self._task = self._progress.add_task("run", total=num_rounds, status=FIRST_PHASE)
        self.phase = FIRST_PHASE  # until round 1 ends: what the run is starting

    def __enter__(self) -> RunOutput:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def feed(self, raw: bytes) -> None:
        self.log.write(raw)
        self.log.flush()
        line = raw.decode(errors="replace").rstrip("\n")
        if self.verbose:
            self.console.out(line, highlight=False)
        elif is_alarm(line):
            self._progress.console.print(plain(line), markup=False, highlight=False)
        row = parse_progress_line(plain(line))
        if row is None:
            if not self.rounds and (phase := startup_phase(line, self.phase)) != self.phase:
                self.phase = phase
                self._progress.update(self._task, status=phase)
            return
        self.rounds = row["round"]
        self.megabytes += row["megabytes"]
        self.last = row
        self._progress.update(
            self._task,
            completed=self.rounds,
            status=f"acc {row['accuracy']:.4f}  vtime {row['virtual_time_s']:.1f} s  "
            f"{self.megabytes:.1f} MB",
        )
