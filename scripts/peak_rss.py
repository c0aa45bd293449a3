"""Peak resident memory of every process a command starts, by kind of process.

    python -m scripts.peak_rss -- python -m scripts.run_federation --agents --run-config ...

Runs the command and, every 0.1 s until it ends, reads each process of its tree (by parent
PID, with the process groups its members started) from /proc: its peak resident set
(``VmHWM``) so far. Prints, per kind (the program name, with ``-m module`` for Python), how
many processes there were and the largest and median peak in MB. A process that lives
less than the sampling interval can be missed; Flower's ClientApp processes live seconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scripts.processes import process_tree

SAMPLE_S = 0.1


def kind(pid: int) -> str | None:
    """``flwr-clientapp``, ``python -m client.agent``, ...; None if it is gone."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    words = [a.decode(errors="replace") for a in argv if a]
    if not words:
        return None
    name = Path(words[0]).name
    if name.startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            return f"python -m {words[2]}"
        return Path(words[1]).name
    return name


def peak_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    peaks: dict[int, tuple[str, int]] = {}
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        for pid in process_tree(proc.pid):
            name, kb = kind(pid), peak_kb(pid)
            if name is not None and kb is not None:
                peaks[pid] = (name, max(kb, peaks.get(pid, (name, 0))[1]))
        time.sleep(SAMPLE_S)
    by_kind: dict[str, list[int]] = {}
    for name, kb in peaks.values():
        by_kind.setdefault(name, []).append(kb)
    print("| process | count | peak RSS max (MB) | peak RSS median (MB) |")
    print("|---|---|---|---|")
    for name, values in sorted(by_kind.items(), key=lambda item: -max(item[1])):
        print(
            f"| {name} | {len(values)} | {max(values) / 1024:.0f} "
            f"| {statistics.median(values) / 1024:.0f} |"
        )
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
