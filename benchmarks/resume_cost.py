"""What stopping and resuming a simulation costs, and whether the resumed run is the run that
never stopped.

    .venv/bin/python -m benchmarks.resume_cost --rounds 40 [--modes dense allgather ...]

For each configuration of ``configs/measure/resume.toml``, three runs as ``make run`` starts
them: straight through; stopped after half the rounds (its last checkpoint); resumed from that
checkpoint to the end. Prints a Markdown table: whether the resumed ``rounds.jsonl`` equals
the uninterrupted one wall-clock fields aside (else the first round that differs), the bytes
of the checkpoint (``checkpoint.npz``) and of the clients' saved states, the seconds the
clients took to save their states and to take them back (the server's log), and launch to
exit of each run.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from commands.run import run as run_simulation
from commands.run_config import parse_overrides
from common.settings import PROJECT_ROOT
from server.checkpoint import CHECKPOINT_NAME
from server.records import read_rounds, without_wall_clock

_GRID = tomllib.loads((PROJECT_ROOT / "configs" / "measure" / "resume.toml").read_text())
MODES: dict[str, str] = _GRID["modes"]
COMMON: str = _GRID["common"]
SAVED = re.compile(r"clients saved their state \((?P<mb>[\d.]+) MB\) in (?P<s>[\d.]+) s")
RESTORED = re.compile(r"took their state of round \d+ back in (?P<s>[\d.]+) s")


def run(config: str, out: Path, log: Path) -> float:
    """One run of ``config`` into ``out``, its output in ``log``; its launch-to-exit seconds."""
    began = time.perf_counter()
    with log.open("w") as stream:
        code, _ = run_simulation(parse_overrides(f"{config} results-dir={out}"), stream_to=stream)
    if code != 0:
        raise RuntimeError(f"the run failed (exit {code}); see {log}")
    return time.perf_counter() - began


def _last(pattern: re.Pattern[str], log: Path) -> re.Match[str]:
    found = list(pattern.finditer(log.read_text(errors="replace")))
    if not found:
        raise RuntimeError(f"{log} says nothing matching {pattern.pattern!r}")
    return found[-1]


def first_difference(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> int | None:
    """The first round whose record differs, wall clock aside (None: none does)."""
    for mine, theirs in zip(got, want, strict=False):
        if without_wall_clock(mine) != without_wall_clock(theirs):
            return int(theirs["round"])
    return None if len(got) == len(want) else min(len(got), len(want)) + 1


def measure(mode: str, rounds: int, tmp: Path) -> dict[str, Any]:
    config = f"{MODES[mode]} {COMMON} num-server-rounds={rounds}"
    half = rounds // 2
    whole, stopped = tmp / f"{mode}-whole", tmp / f"{mode}-stopped"
    resumed_log = tmp / f"{mode}-resumed.log"
    whole_s = run(config, whole, tmp / f"{mode}-whole.log")
    stop_s = run(
        f"{config} num-server-rounds={half} checkpoint-every={half}",
        stopped,
        tmp / f"{mode}-stopped.log",
    )
    resume_s = run(f"{config} checkpoint-every={half} resume-from={stopped}", stopped, resumed_log)
    saved = _last(SAVED, resumed_log)  # the last checkpoint's
    restored = _last(RESTORED, resumed_log)
    differs = first_difference(read_rounds(stopped), read_rounds(whole))
    return {
        "identical": "yes" if differs is None else f"no, from round {differs}",
        "checkpoint_mb": (stopped / CHECKPOINT_NAME).stat().st_size / 1e6,
        "states_mb": float(saved["mb"]),
        "save_s": float(saved["s"]),
        "restore_s": float(restored["s"]),
        "whole_s": whole_s,
        "stop_s": stop_s,
        "resume_s": resume_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="resume-cost-") as tmp:
        for mode in args.modes:
            figures = measure(mode, args.rounds, Path(tmp))
            rows.append((mode, figures))
            print(f"{mode}: {figures}", flush=True)
    print(f"\n{args.rounds} rounds, stopped after {args.rounds // 2}; {COMMON}")
    print(
        "| configuration | resumed = uninterrupted | checkpoint (MB) | client states (MB) "
        "| save (s) | take back (s) | launch to exit: whole, first half, resumed half (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, f in rows:
        print(
            f"| {mode} | {f['identical']} | {f['checkpoint_mb']:.2f} | {f['states_mb']:.2f} "
            f"| {f['save_s']:.2f} | {f['restore_s']:.2f} "
            f"| {f['whole_s']:.0f}, {f['stop_s']:.0f}, {f['resume_s']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
