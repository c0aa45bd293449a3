"""How alike honest updates get: the justification of ``DUPLICATE_COSINE``
(strategies/policies/robust.py), above which updates from several nodes are one update sent
twice and refused.

Runs honest federations in process under the default ``clip-screen`` and prints, per run, the
largest and the 99th percentile over rounds of the most alike pair's cosine in a round, taken as
the screen takes it (the parameters only, the buffers left out).

    .venv/bin/python -m benchmarks.copy_spread
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import tomllib
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from common.settings import PROJECT_ROOT

CASES: dict[str, str] = tomllib.loads(
    (PROJECT_ROOT / "configs" / "measure" / "copy-spread.toml").read_text()
)["cases"]


def most_alike(vectors: np.ndarray) -> float:
    """The largest cosine between two rows."""
    norms = np.linalg.norm(vectors, axis=1)
    unit = vectors / np.where(norms > 0.0, norms, 1.0)[:, None]
    cosines = unit @ unit.T
    return float(cosines[np.triu_indices(len(vectors), 1)].max())


def spread(name: str) -> tuple[str, float, float, int]:
    import strategies.policies.robust as robust
    from commands.run_config import parse_overrides, resolve_settings
    from common.flower_patches import set_task_identity
    from testing.in_process import InProcessGrid, run_server_app

    set_task_identity()
    logging.getLogger("flwr").setLevel(logging.ERROR)
    pairs: list[float] = []
    refused: list[int] = []
    screen = robust.ClipScreen.screen

    def watched(self, partitions, vectors, positions=None):  # type: ignore[no-untyped-def]
        if len(vectors) >= 2:
            pairs.append(most_alike(self._parameters(vectors, positions)))
        reasons = screen(self, partitions, vectors, positions)
        refused.append(sum(r is not None for r in reasons))
        return reasons

    robust.ClipScreen.screen = watched  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as results:
        settings = resolve_settings(parse_overrides(f"{CASES[name]} results-dir={results}"))
        run_server_app(InProcessGrid(settings))
    return name, max(pairs), float(np.percentile(pairs, 99)), sum(refused)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), help="default: all")
    args = parser.parse_args()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(spread, args.cases or list(CASES)))
    print("| run | most alike pair | 99th percentile | replies refused |")
    print("|---|---|---|---|")
    for name, largest, p99, refused in rows:
        print(f"| {name} | {largest:.4f} | {p99:.4f} | {refused} |")


if __name__ == "__main__":
    main()
