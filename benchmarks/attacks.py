"""One hostile client against each defence: final accuracy under attack and clean.

Each run is the real ServerApp and ClientApps in process (``testing.in_process``), 10 clients,
150 rounds; the attacker is partition 0 (node 100), whose replies are rewritten on the way
to the server:
- ``scale``: its update x 1e6, every round;
- ``huge-once``: its update's values set to 1e30, in round 10;
- ``flip``: its update x −10 (sign-flipped), every round;
- ``examples``: num-examples 10**12, every round;
- ``var-claim``: ||TopK(e)||² claimed 1e300 (VAR leader), every round;
- ``var-pin``: ||TopK(e)||² claimed 50 x its own (within the 100 x bound, so it leads under
  VAR), and when it leads it names indices 0..k-1 and sends values there whose energy is what it
  claimed: its claim checks out, its index set is useless;
- ``inject``: injected samples with features 1e30, every round;
- ``batch-claim``: honest updates, num-examples and stream-samples claimed 1024 (one local
  step of the largest batch, within the bounds), every round: it would drive the linearly
  scaled learning rate up;
- ``junk-record``: honest replies with a 4 MB record nobody reads attached, every round;
- ``restart``: ``flip``, and after every 4th training reply it comes back as a new node
  (sooner than the screen judges a history, were histories kept per node id);
- ``absent-2``, not an attack: partitions 0 and 1 never answer, what any defence that refuses
  ``collude-2`` is left with;
- ``collude-2``, ``collude-3``: partitions 0 and 1 (and 2) send one and the same update, the
  first colluder's of the phase x −10 (sign-flipped), every round: a coalition the screen
  must not count as the rest.
The ``flagship`` mode is configs/flagship.toml (600 rounds) under its default defence; the
``-sampled`` modes train 4 of the 10 clients a round.

    .venv/bin/python -m benchmarks.attacks --out /tmp/attacks             # all runs, two at a time
    .venv/bin/python -m benchmarks.attacks --out /tmp/attacks --modes flagship --seeds 42
    .venv/bin/python -m benchmarks.attacks --out /tmp/attacks --attacks clean collude-2 \
        --defences clip-screen
    .venv/bin/python -m benchmarks.attacks --out /tmp/attacks --table     # the table only
"""

from __future__ import annotations

import argparse
import json
import logging
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from commands.run_config import parse_overrides, resolve_settings
from common.flower_patches import set_task_identity
from common.settings import PROJECT_ROOT, table_names
from server.records import read_rounds
from testing.attacks import ABSENT, ATTACKS, COLLUDERS, AttackGrid
from testing.in_process import run_server_app

GRID_FILE = PROJECT_ROOT / "configs" / "measure" / "attacks.toml"


@dataclass(frozen=True)
class Mode:
    """One row of the attack grid (configs/measure/attacks.toml)."""

    overlay: str  # run config over the grid's ``common``
    defences: tuple[str, ...]
    attacks: tuple[str, ...]


def load_grid(path: Path = GRID_FILE) -> tuple[str, dict[str, Mode]]:
    """(common run config, modes) of an attack grid; an unknown key, attack or group is an
    error that names the file and the key."""
    spec = tomllib.loads(path.read_text())
    known = {*ATTACKS, *COLLUDERS, *ABSENT}
    groups = {name: tuple(attacks) for name, attacks in spec.get("groups", {}).items()}
    for name, members in groups.items():
        if unknown := sorted(set(members) - known):
            raise SystemExit(f"{path}: groups.{name}: unknown attacks {unknown}")
    modes = {}
    for name, row in spec.get("modes", {}).items():
        if extra := sorted(set(row) - {"overlay", "defences", "attacks"}):
            raise SystemExit(f"{path}: modes.{name}: unknown keys {extra}")
        defences = row.get("defences")
        if not defences or set(defences) - set(table_names("robust")):
            raise SystemExit(
                f"{path}: modes.{name}.defences: {defences!r} is not a list of "
                f"{', '.join(table_names('robust'))}"
            )
        attacks: list[str] = []
        for entry in row.get("attacks", []):
            if entry not in groups and entry not in known:
                raise SystemExit(f"{path}: modes.{name}.attacks: unknown attack {entry!r}")
            attacks.extend(groups.get(entry, (entry,)))
        modes[name] = Mode(str(row.get("overlay", "")), tuple(defences), tuple(attacks))
    return str(spec.get("common", "")), modes


COMMON, MODES = load_grid()


def run_one(job: tuple[str, str | None, str, int, str]) -> dict[str, Any]:
    """One (mode, attack or None, defence, seed) run; its final and best accuracy."""
    mode, attack, defence, seed, _ = job
    set_task_identity()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    results = _results(job)
    text = f"{COMMON} {MODES[mode].overlay} robust={defence} seed={seed} results-dir={results}"
    if attack in ABSENT:
        text += " round-timeout-s=1"
    if not (results / "summary.json").exists():
        run_server_app(AttackGrid(resolve_settings(parse_overrides(text)), attack))
    summary = json.loads((results / "summary.json").read_text())
    refused, replies, first_refused = refusals(read_rounds(results))
    return {
        "mode": mode,
        "attack": attack or "clean",
        "defence": defence,
        "seed": seed,
        "final": summary["final_accuracy"],
        "best": summary["best_accuracy"],
        "a20": summary["last_rounds"]["mean_accuracy"],
        "refused": refused,
        "replies": replies,
        "first_refused": first_refused,
    }


def refusals(rounds: list[dict[str, Any]]) -> tuple[int, int, int | None]:
    """(replies refused, replies received, the first round that refused one) of a run's
    records. A round's refused replies are its nodes named in ``refused`` (``node N: ...`` or
    ``node N (phase): ...``), each once; a round's own entry (``round R: ...; not applied``)
    is not a reply. Received: those aggregated and those refused (an Allreduce leader refused
    in a later phase but aggregated counts twice)."""
    refused_per_round = [
        len(
            {
                entry.split(":")[0].split(" (")[0]
                for entry in r["refused"]
                if entry.startswith("node ")
            }
        )
        for r in rounds
    ]
    replies = sum(refused_per_round) + sum(r["num_clients"] for r in rounds)
    first = next((r["round"] for r, n in zip(rounds, refused_per_round, strict=True) if n), None)
    return sum(refused_per_round), replies, first


def jobs(
    out: str,
    seeds: list[int],
    modes: list[str] | None = None,
    attacks: list[str] | None = None,
    defences: list[str] | None = None,
) -> list[tuple[str, str | None, str, int, str]]:
    """Every (mode, attack, defence, seed) run asked for; ``None``: all of them."""
    return [
        (mode, attack, defence, seed, out)
        for mode, row in MODES.items()
        if modes is None or mode in modes
        for attack in (None, *row.attacks)
        if attacks is None or (attack or "clean") in attacks
        for defence in row.defences
        if defences is None or defence in defences
        for seed in seeds
    ]


def table(rows: list[dict[str, Any]]) -> str:
    """A20 (mean accuracy of the last 20 rounds), mean over seeds, per (mode, attack) and
    defence."""
    defences = table_names("robust")
    lines = [
        "| mode | attack | " + " | ".join(f"robust = {d}" for d in defences) + " |",
        "|---" * (len(defences) + 2) + "|",
    ]
    keys = sorted({(r["mode"], r["attack"]) for r in rows}, key=lambda k: (k[0], k[1] != "clean"))
    for mode, attack in keys:
        cells = []
        for defence in defences:
            a20s = [
                r["a20"]
                for r in rows
                if (r["mode"], r["attack"], r["defence"]) == (mode, attack, defence)
            ]
            cells.append(f"{np.mean(a20s):.4f}" if a20s else "")
        lines.append(f"| {mode} | {attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def refusal_table(rows: list[dict[str, Any]]) -> str:
    """Runs without an attacker: per mode and defence, the honest replies refused (share over
    the seeds' runs, the first round of each), and A20 beside ``robust = none``'s, mean over
    seeds."""
    lines = [
        "| mode | defence | honest replies refused | first round refusing, per seed | "
        "A20 | A20 - none's |",
        "|---|---|---:|---|---:|---:|",
    ]
    clean = [r for r in rows if r["attack"] == "clean"]
    for mode, defence in sorted({(r["mode"], r["defence"]) for r in clean}):
        mine = sorted(
            (r for r in clean if (r["mode"], r["defence"]) == (mode, defence)),
            key=lambda r: r["seed"],
        )
        none = [r["a20"] for r in clean if (r["mode"], r["defence"]) == (mode, "none")]
        refused, replies = sum(r["refused"] for r in mine), sum(r["replies"] for r in mine)
        a20 = float(np.mean([r["a20"] for r in mine]))
        gap = f"{100 * (a20 - np.mean(none)):+.2f} points" if none else ""
        firsts = ", ".join(f"{r['seed']}: {r['first_refused'] or '-'}" for r in mine)
        lines.append(
            f"| {mode} | {defence} | {refused} of {replies} ({100 * refused / replies:.2f} %) "
            f"| {firsts} | {a20:.4f} | {gap} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 7])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--modes", nargs="+", choices=sorted(MODES), help="default: all")
    parser.add_argument(
        "--attacks",
        nargs="+",
        choices=["clean", *sorted(ATTACKS), *COLLUDERS, *ABSENT],
        help="default: all",
    )
    parser.add_argument("--defences", nargs="+", help="default: each mode's")
    parser.add_argument("--table", action="store_true", help="only the table of finished runs")
    args = parser.parse_args()
    todo = jobs(args.out, args.seeds, args.modes, args.attacks, args.defences)
    if args.table:
        rows = [run_one(j) for j in todo if _done(j)]
    else:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(run_one, todo))
    print(table(rows))
    print()
    print(refusal_table(rows))
    _merge_rows(Path(args.out) / "attacks.json", rows)


def _merge_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """attacks.json: these rows over those of earlier runs into the same directory."""
    key = ("mode", "attack", "defence", "seed")
    old = json.loads(path.read_text()) if path.exists() else []
    merged = {tuple(r[k] for k in key): r for r in [*old, *rows]}
    path.write_text(json.dumps(sorted(merged.values(), key=lambda r: str(r)), indent=1))


def _results(job: tuple[str, str | None, str, int, str]) -> Path:
    mode, attack, defence, seed, out = job
    return Path(out) / f"{mode}-{attack or 'clean'}-{defence}-{seed}"


def _done(job: tuple[str, str | None, str, int, str]) -> bool:
    return (_results(job) / "summary.json").exists()


if __name__ == "__main__":
    main()
