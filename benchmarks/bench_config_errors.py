"""Wall time of ``python -m commands.run`` refusing a bad run config, one process each.

    python -m benchmarks.bench_config_errors [--only NAME ...]

Each config runs as a user would start it (a fresh interpreter, its imports included), with
the Hugging Face Hub unreachable (``HF_ENDPOINT`` a closed loopback port, an empty datasets
cache) so the hub case is the no-network one. Prints per config: its exit code (a refusal is
2), whether the message names the key, whether a traceback or a results directory appeared,
and the wall and CPU seconds; then the largest wall time. Exits 1 when a config was not
refused that way. The five cases of issue 52 are among them; the module beside the
Makefile is written for the measurement and removed after it.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from commands.run import free_port
from common.settings import PROJECT_ROOT

BESIDE_THE_MAKEFILE = "edgeflex_bench_model"


@dataclass(frozen=True)
class BadConfig:
    name: str
    config: str  # --run-config text
    key: str  # what the refusal must name


CONFIGS = (
    BadConfig("auto-collectives typo", "collective=auto auto-collectives=allreduce,alllgather",
              "auto-collectives"),
    BadConfig("cr-ratio-ramp 0.25", "collective=auto cr-schedule=nsga2 cr-ratio-ramp=0.25",
              "cr-ratio-ramp"),
    BadConfig("hub dataset, no network", "dataset=ylecun/mnist", "dataset"),
    BadConfig("model beside the Makefile", f"model={BESIDE_THE_MAKEFILE}:small", "model"),
    BadConfig("unknown key", "num-client=3", "num-clients"),
    BadConfig("three faults at once", "compresion-ratio=0.1 seed=-1 collective=alllgather",
              "compression-ratio"),
    BadConfig("device mix", "device-mix=moon", "device-mix"),
    BadConfig("resume without checkpoint", "resume-from=/nonexistent", "resume-from"),
)  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    code: int
    names_key: bool
    traceback: bool
    wrote: bool
    wall_s: float
    cpu_s: float  # the child's user + system time: what a busy machine does not inflate

    @property
    def ok(self) -> bool:
        return self.code == 2 and self.names_key and not self.traceback and not self.wrote


def refuse(bad: BadConfig, scratch: Path, env: dict[str, str]) -> Refusal:
    results = scratch / f"results-{bad.name.replace(' ', '-')}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands.run",
            "--run-config",
            f"{bad.config} results-dir={results}",
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall_s = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Refusal(
        code=done.returncode,
        names_key=bad.key in done.stderr,
        traceback="Traceback" in done.stderr + done.stdout,
        wrote=results.exists(),
        wall_s=wall_s,
        cpu_s=cpu_s,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these configs only")
    args = parser.parse_args(argv)
    chosen = [c for c in CONFIGS if not args.only or c.name in args.only]
    module = PROJECT_ROOT / f"{BESIDE_THE_MAKEFILE}.py"
    with tempfile.TemporaryDirectory() as scratch:
        env = os.environ | {
            "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "HF_DATASETS_CACHE": str(Path(scratch) / "hf-datasets"),
        }
        module.write_text("from torch import nn\n\n\ndef small(spec):\n    return nn.Flatten()\n")
        try:
            header = (
                ("exit", 4),
                ("key", 4),
                ("trace", 5),
                ("wrote", 5),
                ("wall s", 7),
                ("cpu s", 6),
            )
            print(f"{'config':<28} " + " ".join(f"{name:>{width}}" for name, width in header))
            refusals = []
            for bad in chosen:
                r = refuse(bad, Path(scratch), env)
                refusals.append(r)
                print(
                    f"{bad.name:<28} {r.code:>4} {'yes' if r.names_key else 'NO':>4} "
                    f"{'YES' if r.traceback else 'no':>5} {'YES' if r.wrote else 'no':>5} "
                    f"{r.wall_s:>7.2f} {r.cpu_s:>6.2f}",
                    flush=True,
                )
        finally:
            module.unlink(missing_ok=True)
    print(f"largest wall time: {max(r.wall_s for r in refusals):.2f} s over {len(refusals)}")
    return 0 if all(r.ok for r in refusals) else 1


if __name__ == "__main__":
    sys.exit(main())
