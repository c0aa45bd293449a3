"""Compression benchmark: Top-k selection and server aggregation. Prints figures; asserts nothing.

    .venv/bin/python -m benchmarks.bench_compression [--repeats 7]

1. Selection over 1M and 10M float32 values at c = 0.1, 0.01, 0.001: our exact selection
   (``compress.topk.topk_indices``) against ``torch.topk`` on |x| and against one
   ``abs(x) >= t`` pass (the memory-bound floor). Median of ``--repeats`` runs.
2. Server aggregation time against the number of clients (4 to 100) for both modes, on a
   model of 1M parameters at c = 0.01: Allgather's scatter-add of N Top-k vectors and
   Allreduce's sum of N value vectors at shared indices.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from collectives.maths import scatter_add, weighted_average
from compress.topk import topk_indices
from wire.codec import topk_count


def median_s(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _torch_topk(x: torch.Tensor, k: int) -> object:
    return torch.topk(x.abs(), k, sorted=False)


def _floor(x: np.ndarray, threshold: float) -> object:
    return np.abs(x) >= threshold


def selection(repeats: int) -> None:
    print(f"Top-k selection, median of {repeats} (torch threads: {torch.get_num_threads()})")
    print(
        f"{'n':>10} {'c':>6} {'ours ms':>9} {'torch.topk ms':>14} {'floor ms':>9} "
        f"{'vs torch':>9} {'vs floor':>9}"
    )
    rng = np.random.default_rng(0)
    for n in (1_000_000, 10_000_000):
        x = rng.standard_normal(n).astype(np.float32)
        xt = torch.from_numpy(x)
        for c in (0.1, 0.01, 0.001):
            k = topk_count(n, c)
            threshold = float(np.sort(np.abs(x[:: max(1, n // 10_000)]))[-max(1, int(c * 10_000))])
            ours = median_s(partial(topk_indices, x, k), repeats)
            reference = median_s(partial(_torch_topk, xt, k), repeats)
            floor = median_s(partial(_floor, x, threshold), repeats)
            print(
                f"{n:>10} {c:>6} {ours * 1e3:>9.2f} {reference * 1e3:>14.2f} {floor * 1e3:>9.2f} "
                f"{reference / ours:>8.1f}x {ours / floor:>8.2f}x"
            )


def aggregation(repeats: int, size: int = 1_000_000, ratio: float = 0.01) -> None:
    k = topk_count(size, ratio)
    print(f"\nServer aggregation, d = {size:,}, c = {ratio} (k = {k:,}), median of {repeats}")
    # own index sets (scattered into the model) against values at one shared index set
    print(f"{'clients':>8} {'scatter-add ms':>15} {'average ms':>11}")
    rng = np.random.default_rng(1)
    for n in (4, 10, 25, 50, 100):
        index_sets = [np.sort(rng.choice(size, size=k, replace=False)) for _ in range(n)]
        value_sets = [rng.standard_normal(k).astype(np.float32) for _ in range(n)]
        weights = [1.0] * n
        scattered = median_s(partial(scatter_add, index_sets, value_sets, weights, size), repeats)
        shared = median_s(partial(weighted_average, value_sets, weights), repeats)
        print(f"{n:>8} {scattered * 1e3:>15.2f} {shared * 1e3:>11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    selection(args.repeats)
    aggregation(args.repeats)


if __name__ == "__main__":
    main()
