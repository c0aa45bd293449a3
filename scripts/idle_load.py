"""CPU an idle local federation burns, by kind of process: what polling costs.

    python -m scripts.idle_load --nodes 10 [--agents] [--short-polls]

Starts a SuperLink and the nodes as ``scripts.run_federation`` does (no run), waits
``--settle-s`` for every process to finish starting (agents import torch), then measures the
CPU time each kind of process uses over ``--window-s`` and prints it in cores (1.0 = one core
busy the whole window). The SuperLink's share is what the nodes' polls cost the server.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from scripts.peak_rss import kind
from scripts.processes import process_tree
from scripts.run_federation import NodeRuntime, local_federation
from scripts.run_simulation import resolve_settings


def cpu_seconds(pids: set[int]) -> dict[int, tuple[str, float]]:
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = kind(pid)
        if name is not None:
            out[pid] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--agents", action="store_true")
    parser.add_argument("--short-polls", action="store_true")
    parser.add_argument("--settle-s", type=float, default=50.0)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--logs", type=Path, default=Path("/tmp/edgeflex-idle-load"))
    args = parser.parse_args(argv)
    settings = resolve_settings({"num-clients": args.nodes})
    runtime = NodeRuntime(agents=args.agents, short_polls=args.short_polls)
    with local_federation(settings, args.logs, runtime=runtime) as federation:
        time.sleep(args.settle_s)
        pids: set[int] = set()
        for proc in federation.started:
            pids |= process_tree(proc.pid)
        pids |= process_tree(os.getpid()) - {os.getpid()}
        before = cpu_seconds(pids)
        time.sleep(args.window_s)
        after = cpu_seconds(pids)
    cores: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        if pid in before:
            cores[name] = cores.get(name, 0.0) + (seconds - before[pid][1]) / args.window_s
    label = f"{args.nodes} idle nodes, agents={args.agents}, short-polls={args.short_polls}"
    print(f"| process ({label}) | cores |")
    print("|---|---|")
    for name, value in sorted(cores.items(), key=lambda item: -item[1]):
        print(f"| {name} | {value:.2f} |")
    print(f"| total | {sum(cores.values()):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
