"""How long Synthetic(α, β) takes to generate: every client of a large federation, one by one.

python -m benchmarks.bench_synthetic --clients 1000
"""

from __future__ import annotations

import argparse
import sys
import time

from common.synthetic import client_samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    samples = sum(
        len(client_samples(args.alpha, args.beta, args.seed, k)[1]) for k in range(args.clients)
    )
    seconds = time.perf_counter() - began
    print(
        f"Synthetic({args.alpha:g}, {args.beta:g}), seed {args.seed}: {args.clients} clients, "
        f"{samples} samples in {seconds:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
