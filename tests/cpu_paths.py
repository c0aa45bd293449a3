"""How far the golden runs move under other CPU kernel paths, and after a Top-k near-tie.

``paths``: every golden case run under each forced path (a fresh process per path, since MKL and
ATen read their variables at load), compared with tests/golden: the largest relative float
difference in the rounds before the case's near-tie round, and every other difference
(discrete fields anywhere, decisions after the near-tie).
``swap``: one golden case with one Top-k cut made the other way (the k-th entry kept out, the
best one left out kept) at the first cut of a round, as another CPU might at a near-tie; how far
the later rounds move, and whether any decision changes.

    .venv/bin/python -m tests.cpu_paths paths native MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=default
    .venv/bin/python -m tests.cpu_paths swap auto-nsga2-c1-edge 10
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import compress.topk
from common.flower_patches import set_task_identity
from tests.records_match import TopkCutSpy, decisions, differences
from tests.test_golden import CASES, GOLDEN_DIR, NEAR_TIE_ROUND, RECORDED_DEFAULTS, run_case


def _golden(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDEN_DIR / f"{name}.jsonl").read_text().splitlines()]


def _float_gaps(got: Any, want: Any) -> list[float]:
    """Relative differences of every float pair, where the structures match."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [g for key in want.keys() & got.keys() for g in _float_gaps(got[key], want[key])]
    if isinstance(want, list) and isinstance(got, list):
        return [g for a, b in zip(got, want, strict=False) for g in _float_gaps(a, b)]
    if isinstance(want, float) and isinstance(got, float) and math.isfinite(want):
        return [abs(got - want) / max(abs(got), abs(want), 1e-300)]
    return []


def compare(name: str, rounds: list[dict[str, Any]]) -> tuple[float, list[str], list[str]]:
    """(largest float gap before the near-tie, discrete differences there, decision changes
    from the near-tie on) of one run against its golden records."""
    near_tie = NEAR_TIE_ROUND.get(name, math.inf)
    largest, discrete, changed = 0.0, [], []
    for got, want in zip(rounds, _golden(name), strict=True):
        label = f"round {want['round']}"
        if want["round"] < near_tie:
            largest = max([largest, *_float_gaps(got, want)])
            discrete += [d for d in differences(got, want, label) if "tolerance" not in d]
        else:
            changed += differences(decisions(got), decisions(want), f"{label} (decisions)")
    return largest, discrete, changed


def _run(name: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as results:
        rounds, _ = run_case(f"{CASES[name]} {RECORDED_DEFAULTS}", Path(results))
    return rounds


def run_paths(paths: list[str]) -> None:
    for path in paths:
        env = os.environ | dict(item.split("=", 1) for item in path.split() if path != "native")
        out = subprocess.run(
            [sys.executable, "-m", "tests.cpu_paths", "_cases"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        print(f"== {path}")
        for line in out.splitlines():
            case = json.loads(line)
            print(
                f"{case['name']:26s} floats {case['largest']:.1e}  "
                f"discrete {len(case['discrete'])}  decisions changed {len(case['changed'])}"
                + "".join(f"\n    {d}" for d in case["discrete"][:3] + case["changed"][:3])
            )


def _cases() -> None:
    for name in CASES:
        largest, discrete, changed = compare(name, _run(name))
        row = {"name": name, "largest": largest, "discrete": discrete, "changed": changed}
        print(json.dumps(row), flush=True)


def swap(name: str, at_round: int) -> None:
    """The run with the first cut of ``at_round`` made the other way."""
    exact = compress.topk._exact
    seen_rounds = TopkCutSpy()
    swapped = False

    def other_way(
        magnitude: NDArray[np.float32], positions: NDArray[np.int64], k: int
    ) -> NDArray[np.int64]:
        nonlocal swapped
        kept = exact(magnitude, positions, k)
        if swapped or len(seen_rounds.round_margins) + 1 != at_round or positions.size <= k:
            return kept
        swapped = True
        order = np.argsort(-magnitude[positions], kind="stable")
        kth, first_out = positions[order[k - 1]], positions[order[k]]
        return np.sort(np.append(kept[kept != kth], first_out))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compress.topk, "_exact", other_way)
        with seen_rounds.watching(patch):  # inside: the spy wraps other_way and undoes first
            rounds = _run(name)
    print(f"{name}: the first Top-k cut of round {at_round} made the other way")
    for got, want in zip(rounds, _golden(name), strict=True):
        gaps = _float_gaps(got, want)
        changed = differences(decisions(got), decisions(want), "")
        print(
            f"round {want['round']:3d}  floats up to {max(gaps, default=0.0):.1e}  "
            f"accuracy {got['accuracy'] - want['accuracy']:+.4f}  "
            f"bytes down {got['bytes_down'] - want['bytes_down']:+d}  "
            f"decisions {changed or 'same'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    paths = commands.add_parser("paths", help="the golden cases under forced CPU paths")
    paths.add_argument("paths", nargs="+", help="'native' or VAR=VALUE (several: 'A=1 B=2')")
    swapping = commands.add_parser("swap", help="one case with one cut made the other way")
    swapping.add_argument("case", choices=list(CASES))
    swapping.add_argument("round", type=int)
    commands.add_parser("_cases")
    args = parser.parse_args()
    set_task_identity()
    if args.command == "paths":
        run_paths(args.paths)
    elif args.command == "swap":
        swap(args.case, args.round)
    else:
        _cases()


if __name__ == "__main__":
    import logging

    logging.getLogger("flwr").setLevel(logging.ERROR)
    main()
