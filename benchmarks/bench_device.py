"""Measure this machine as a device preset: sustained training FLOP/s and per-step overhead.

Times one local SGD step (the clients' own ``local_sgd``) of each model at several batch
sizes and fits the virtual clock's compute model, time = overhead + batch x FLOPs per sample /
throughput, by least squares on relative error: per model, and jointly over all models (the
one pair a device preset holds; the script prints how far it is from each measured step).

    .venv/bin/python -m benchmarks.bench_device [--models resnet mlp] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch

from client.training import local_sgd
from common.data import DIGITS_SPEC, ArrayData
from common.models import build_model
from common.params import model_to_vector
from common.workload import train_flops_per_sample

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
GEMM_SIZE = 2048


def gemm_flops_per_s(size: int = GEMM_SIZE, repeats: int = 5) -> float:
    """Best of ``repeats`` float64 products of two size x size matrices."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    a @ b  # warm-up
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2.0 * size**3 / best


def _timed(fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - began


def step_seconds(name: str, batch: int, repeats: int) -> float:
    """Median wall time of one local SGD step of ``batch`` samples of digits' shape."""
    model = build_model(name, DIGITS_SPEC, seed=0)
    start = model_to_vector(model)
    rng = np.random.default_rng(0)
    data = ArrayData(
        x=rng.standard_normal((batch, DIGITS_SPEC.num_features)).astype(np.float32),
        y=rng.integers(0, DIGITS_SPEC.num_classes, batch).astype(np.int64),
    )
    ids = [np.arange(batch, dtype=np.int64)]
    local_sgd(model, start, data, batches=ids, learning_rate=0.01)  # warm-up
    times = [
        _timed(lambda: local_sgd(model, start, data, batches=ids, learning_rate=0.01))
        for _ in range(repeats)
    ]
    return statistics.median(times)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(overhead s, FLOP/s) of time = overhead + FLOPs / FLOP/s over (step FLOPs, seconds)
    points, least squares on relative error."""
    work = np.array([w for w, _ in points])
    times = np.array([t for _, t in points])
    slope, intercept = np.polyfit(work, times, 1, w=1.0 / times)
    return float(intercept), float(1.0 / slope)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet", "cnn", "mlp"])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    gemm = gemm_flops_per_s()
    print(f"float64 GEMM {GEMM_SIZE}x{GEMM_SIZE}: {gemm / 1e9:.1f} GFLOP/s")
    measured: dict[str, list[tuple[float, float]]] = {}
    for name in args.models:
        flops = train_flops_per_sample(build_model(name, DIGITS_SPEC, seed=0), DIGITS_SPEC)
        seconds = {b: step_seconds(name, b, args.repeats) for b in BATCHES}
        measured[name] = [(b * flops, s) for b, s in seconds.items()]
        overhead, throughput = fit(measured[name])
        steps = ", ".join(f"{b}: {s * 1e3:.2f}" for b, s in seconds.items())
        print(
            f"{name}: {flops / 1e6:.3f} MFLOP per training sample; step ms by batch {{{steps}}}; "
            f"fit: overhead {overhead * 1e3:.2f} ms + {throughput / 1e9:.2f} GFLOP/s"
        )
    overhead, throughput = fit([p for points in measured.values() for p in points])
    print(
        f"joint fit (the preset): step-overhead-ms = {overhead * 1e3:.2f}, "
        f"train-gflops = {throughput / 1e9:.1f}"
    )
    for name, points in measured.items():
        errors = [(overhead + w / throughput) / t - 1.0 for w, t in points]
        batch32 = errors[BATCHES.index(32)]
        print(
            f"  {name}: modelled / measured step - 1 from {min(errors):+.0%} to {max(errors):+.0%}"
            f" ({batch32:+.0%} at batch 32)"
        )


if __name__ == "__main__":
    main()
