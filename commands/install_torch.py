"""Install torch, the build that fits this machine, and say which and from where.

    python -m commands.install_torch          # what `make venv` and `make device-venv` run
    python -m commands.install_torch --spec 'torch==2.12.0'

A plain ``pip install torch`` on x86_64 Linux pulls the multi-GB CUDA build. So, before the
project (whose torch requirement is a range) is installed:

- x86_64 Linux without an NVIDIA driver: PyTorch's CPU wheel index when it answers a short
  probe, else pip's own indexes (pip's configuration may name a local wheel folder);
- x86_64 Linux with an NVIDIA driver: pip's own indexes (the CUDA build);
- aarch64 (a Raspberry Pi, a Jetson): the one Pi pin, ``deploy/torch-aarch64.txt``, from pip's
  own indexes (PyPI's aarch64 wheels);
- anything else (macOS, Windows): pip's own indexes.

It runs before anything else is installed: the standard library only.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TESTED_TORCH = "torch==2.13.0"  # the build the development and CI machines test with
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
AARCH64_PIN = Path(__file__).resolve().parent.parent / "deploy" / "torch-aarch64.txt"
PROBE_TIMEOUT_S = 5.0
X86 = frozenset({"x86_64", "amd64"})
ARM = frozenset({"aarch64", "arm64"})


@dataclass(frozen=True)
class Machine:
    arch: str  # platform.machine(), lower case
    system: str  # platform.system()
    nvidia: bool  # an NVIDIA driver: nvidia-smi on PATH or /proc/driver/nvidia

    @classmethod
    def this(cls) -> Machine:
        nvidia = shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists()
        return cls(platform.machine().lower(), platform.system(), nvidia)


@dataclass(frozen=True)
class Choice:
    requirement: tuple[str, ...]  # pip's words for torch: ("torch==2.13.0",) or ("-r", file)
    index: str | None  # pip's --index-url; None: pip's own configuration
    why: str

    def pip_arguments(self) -> list[str]:
        index = [] if self.index is None else ["--index-url", self.index]
        return [*self.requirement, *index]

    def source(self) -> str:
        return self.index or "pip's own indexes (and any find-links in its configuration)"


def choose(machine: Machine, spec: str | None, cpu_index_answers: Callable[[], bool]) -> Choice:
    """Which torch to install and where from; ``cpu_index_answers`` is asked only when the
    answer matters (x86_64 Linux without an NVIDIA driver)."""
    requirement = (spec or TESTED_TORCH,)
    if machine.arch in ARM and machine.system == "Linux":
        if spec is not None:
            return Choice(requirement, None, "aarch64 Linux, TORCH_SPEC given")
        return Choice(("-r", str(AARCH64_PIN)), None, "aarch64 Linux: the Pi pin")
    if machine.arch not in X86 or machine.system != "Linux":
        return Choice(requirement, None, f"{machine.system} {machine.arch}: pip's default build")
    if machine.nvidia:
        return Choice(requirement, None, "x86_64 Linux with an NVIDIA driver: the CUDA build")
    if cpu_index_answers():
        return Choice(requirement, CPU_INDEX, "x86_64 Linux without an NVIDIA driver")
    return Choice(
        requirement,
        None,
        f"x86_64 Linux without an NVIDIA driver; {CPU_INDEX} did not answer",
    )


def cpu_index_answers(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether PyTorch's CPU index serves its torch page now (a short probe)."""
    request = urllib.request.Request(f"{CPU_INDEX}/torch/", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return bool(response.status < 400)
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", help=f"torch's requirement (default {TESTED_TORCH})")
    args = parser.parse_args(argv)
    spec = args.spec.strip() if args.spec and args.spec.strip() else None
    choice = choose(Machine.this(), spec, cpu_index_answers)
    print(f"torch: {' '.join(choice.requirement)} from {choice.source()} ({choice.why})")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", *choice.pip_arguments()]
    if subprocess.run(pip, check=False).returncode != 0:
        return 1
    shown = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode != 0:
        print(f"torch does not import: {shown.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    version, cuda = shown.stdout.split()
    print(f"installed torch {version} (CUDA {cuda}) from {choice.source()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
