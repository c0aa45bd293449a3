"""How far apart honest ||TopK(e)||² claims are, and how much of their Top-k energy clients
hold at an honest leader's indices: the justification of ``CLAIM_SPREAD`` and
``INDEX_SHARE_FLOOR`` (collectives/allreduce/leaders.py).

Runs honest Allreduce federations in process (VAR leader; IID and Dirichlet non-IID digits, the
MLP and the CNN, streams at S2 rates with rate-sized batches) and prints, per run, the largest
and the 99th percentile over rounds and clients of (claim / median of the others'), and the
smallest and the 1st percentile over rounds of the others' median share at the leader's
index set (``others_share``).

    .venv/bin/python -m benchmarks.claim_spread
"""

from __future__ import annotations

import logging
import tempfile
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from common.settings import PROJECT_ROOT

CASES: dict[str, str] = tomllib.loads(
    (PROJECT_ROOT / "configs" / "measure" / "claim-spread.toml").read_text()
)["cases"]


def spread(name: str) -> tuple[str, float, float, float, float]:
    import collectives.allreduce.collective as allreduce  # where Allreduce looks
    from collectives.allreduce.leaders import MIN_CLAIMS, claim_of
    from commands.run_config import parse_overrides, resolve_settings
    from common.flower_patches import set_task_identity
    from testing.in_process import InProcessGrid, run_server_app

    set_task_identity()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    ratios: list[float] = []
    shares: list[float] = []
    check = allreduce.implausible_claims
    judge = allreduce.others_share

    def observed(participants):  # type: ignore[no-untyped-def]
        claims = [claim_of(p) for p in participants]
        if len(claims) >= MIN_CLAIMS:
            medians = [float(np.median(claims[:i] + claims[i + 1 :])) for i in range(len(claims))]
            ratios.extend(c / m for c, m in zip(claims, medians, strict=True) if m > 0.0)
        return check(participants)

    def judged(leader, participants, chosen):  # type: ignore[no-untyped-def]
        share = judge(leader, participants, chosen)
        if share is not None:
            shares.append(share)
        return share

    allreduce.implausible_claims = observed  # type: ignore[assignment]
    allreduce.others_share = judged  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as out:
        settings = resolve_settings(parse_overrides(f"{CASES[name]} results-dir={Path(out)}"))
        run_server_app(InProcessGrid(settings))
    p99, p1 = float(np.percentile(ratios, 99)), float(np.percentile(shares, 1))
    return name, max(ratios), p99, min(shares), p1


def main() -> None:
    print(
        "| run | largest claim / median of the others | 99th percentile "
        "| smallest share at the leader's I | 1st percentile |"
    )
    print("|---|---|---|---|---|")
    with ProcessPoolExecutor(2) as pool:
        for name, largest, p99, least, p1 in pool.map(spread, CASES):
            print(f"| {name} | {largest:.2f} | {p99:.2f} | {least:.3f} | {p1:.3f} |", flush=True)


if __name__ == "__main__":
    main()
