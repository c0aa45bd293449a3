"""Peak resident memory of every process a command starts, by kind of process.

    python -m benchmarks.peak_rss -- python -m commands.federation --agents --run-config ...

Runs the command and, every 0.1 s until it ends, reads each process of its tree (by parent
PID, with the process groups its members started; psutil) and its resident set: the peak is
the largest sample. Prints, per kind (the program name, with ``-m module`` for Python), how
many processes there were and the largest and median peak in MB, and the largest sum over
all processes at one sample (what the machine held at once). A process that lives less than
the sampling interval can be missed, and so can a peak shorter than it; Flower's ClientApp
processes live seconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from commands.processes import process_tree

SAMPLE_S = 0.1


def kind(pid: int) -> str | None:
    """``flwr-clientapp``, ``python -m client.agent``, ...; None if it is gone."""
    try:
        words = [a for a in psutil.Process(pid).cmdline() if a]
    except psutil.Error:
        return None
    if not words:
        return None
    name = Path(words[0]).name
    if name.startswith("ray::"):  # Ray titles a worker by its task: ray::Actor.method
        return name.split(".")[0]
    if name.startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            return f"python -m {words[2]}"
        return Path(words[1]).name
    return name


def rss_kb(pid: int) -> int | None:
    """Resident set now, in KiB; None if it is gone."""
    try:
        return int(psutil.Process(pid).memory_info().rss) // 1024
    except psutil.Error:
        return None


class PeakRss:
    """Peaks of resident memory seen by sampling process trees: per process, and of the sum
    over all processes at one sample."""

    def __init__(self) -> None:
        self.peaks: dict[int, tuple[str, int]] = {}  # pid -> (kind, peak KiB)
        self.total_kb = 0

    def sample(self, roots: list[int]) -> None:
        pids = {pid for root in roots for pid in process_tree(root)}
        total = 0
        for pid in pids:
            name, kb = kind(pid), rss_kb(pid)
            if name is not None and kb is not None:
                self.peaks[pid] = (name, max(kb, self.peaks.get(pid, (name, 0))[1]))
                total += kb
        self.total_kb = max(self.total_kb, total)

    def by_kind(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for name, kb in self.peaks.values():
            out.setdefault(name, []).append(kb)
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    peaks = PeakRss()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        peaks.sample([proc.pid])
        time.sleep(SAMPLE_S)
    print("| process | count | peak RSS max (MB) | peak RSS median (MB) |")
    print("|---|---|---|---|")
    for name, values in sorted(peaks.by_kind().items(), key=lambda item: -max(item[1])):
        print(
            f"| {name} | {len(values)} | {max(values) / 1024:.0f} "
            f"| {statistics.median(values) / 1024:.0f} |"
        )
    print(f"all processes at once, largest sample: {peaks.total_kb / 1024:.0f} MB")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
