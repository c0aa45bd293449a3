"""Local training on the CPU against this machine's accelerator (``device``): seconds per local
round, and how far the update is from the CPU's.

Each round is what a client's training message costs that depends on the device: the model
moved there, then the clients' own ``local_sgd`` (``--steps`` steps of ``--batch`` digits-shaped
samples; the update back on the CPU as numpy). Median of ``--repeats`` rounds after one
warm-up. Devices this machine lacks are named and skipped, so it runs unchanged on a GPU host.

    .venv/bin/python -m benchmarks.bench_device_train [--models mlp cnn resnet mlp-11m]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch

from client.training import local_sgd
from common.accelerator import DEVICES, resolve
from common.data import DIGITS_SPEC, ArrayData
from common.models import build_model
from common.params import model_to_vector

CPU = "cpu"


def local_round(name: str, device: str, steps: int, batch: int) -> tuple[float, np.ndarray]:
    """Seconds of one local round on ``device`` (model moved there, then trained), and its
    update."""
    model = build_model(name, DIGITS_SPEC, seed=0)
    start = model_to_vector(model)
    rng = np.random.default_rng(0)
    data = ArrayData(
        x=rng.standard_normal((batch * steps, DIGITS_SPEC.num_features)).astype(np.float32),
        y=rng.integers(0, DIGITS_SPEC.num_classes, batch * steps).astype(np.int64),
    )
    ids = [np.arange(i * batch, (i + 1) * batch, dtype=np.int64) for i in range(steps)]
    began = time.perf_counter()
    model.to(resolve(device))
    result = local_sgd(model, start, data, batches=ids, learning_rate=0.01)
    return time.perf_counter() - began, result.update  # the update is on the CPU: synced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "resnet", "mlp-11m"])
    parser.add_argument("--steps", type=int, default=10, help="SGD steps per local round")
    parser.add_argument("--batch", type=int, default=32, help="samples per step")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: as a simulated client)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    devices = [CPU]
    for choice in DEVICES:
        if choice in (CPU, "auto"):
            continue
        try:
            resolve(choice)
            devices.append(choice)
        except ValueError as exc:
            print(f"# {choice} skipped: {exc}")
    gpu = torch.cuda.get_device_name(0) if "cuda" in devices else "none"
    print(
        f"# {platform.machine()}, torch {torch.__version__}, {args.threads} CPU thread(s), "
        f"CUDA device: {gpu}; {args.steps} steps of {args.batch} samples, median of "
        f"{args.repeats}"
    )
    print(f"{'model':<10} {'device':<6} {'s / round':>10} {'ms / step':>10} {'x CPU':>7} max |du|")
    for name in args.models:
        on_cpu: tuple[float, np.ndarray] | None = None
        for device in devices:
            local_round(name, device, args.steps, args.batch)  # warm-up (CUDA context, kernels)
            runs = [local_round(name, device, args.steps, args.batch) for _ in range(args.repeats)]
            seconds = statistics.median(s for s, _ in runs)
            update = runs[0][1]
            if on_cpu is None:
                on_cpu = (seconds, update)
            speed_up = on_cpu[0] / seconds
            gap = float(np.max(np.abs(update - on_cpu[1])))
            print(
                f"{name:<10} {device:<6} {seconds:>10.4f} {1e3 * seconds / args.steps:>10.2f} "
                f"{speed_up:>7.2f} {gap:.2e}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
