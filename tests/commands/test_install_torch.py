"""Which torch the set-up installs, and from where, on each kind of machine (probes faked)."""

from __future__ import annotations

import pytest

from commands.install_torch import (
    AARCH64_PIN,
    CPU_INDEX,
    TESTED_TORCH,
    Choice,
    Machine,
    choose,
    main,
)


class Probe:
    """The CPU index's probe, counting its calls."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answers


X86_CPU = Machine("x86_64", "Linux", nvidia=False)
X86_GPU = Machine("x86_64", "Linux", nvidia=True)
PI = Machine("aarch64", "Linux", nvidia=False)
JETSON = Machine("aarch64", "Linux", nvidia=True)
MAC = Machine("arm64", "Darwin", nvidia=False)
JETPACK = "torch @ file:///wheels/torch-jetpack.whl"


@pytest.mark.parametrize(
    ("machine", "spec", "answers", "requirement", "index", "probed"),
    [
        (X86_CPU, None, True, (TESTED_TORCH,), CPU_INDEX, 1),
        (X86_CPU, None, False, (TESTED_TORCH,), None, 1),  # the local wheel, or PyPI
        (X86_CPU, "torch==2.12.0", True, ("torch==2.12.0",), CPU_INDEX, 1),
        (X86_GPU, None, True, (TESTED_TORCH,), None, 0),  # the CUDA build, no probe
        (PI, None, True, ("-r", str(AARCH64_PIN)), None, 0),
        (JETSON, None, True, ("-r", str(AARCH64_PIN)), None, 0),
        (JETSON, JETPACK, True, (JETPACK,), None, 0),  # NVIDIA's wheel, given
        (MAC, None, True, (TESTED_TORCH,), None, 0),
        (Machine("amd64", "Windows", nvidia=False), None, True, (TESTED_TORCH,), None, 0),
    ],
)
def test_the_set_up_chooses_the_build_that_fits_the_machine(
    machine: Machine,
    spec: str | None,
    answers: bool,
    requirement: tuple[str, ...],
    index: str | None,
    probed: int,
) -> None:
    probe = Probe(answers)
    choice = choose(machine, spec, probe)
    assert (choice.requirement, choice.index) == (requirement, index)
    assert probe.calls == probed  # the network is asked only where its answer matters
    expected = [*requirement, *([] if index is None else ["--index-url", index])]
    assert choice.pip_arguments() == expected


def test_the_set_up_says_where_torch_came_from() -> None:
    assert Choice((TESTED_TORCH,), CPU_INDEX, "x").source() == CPU_INDEX
    assert "pip's own indexes" in Choice((TESTED_TORCH,), None, "x").source()
    unreachable = choose(X86_CPU, None, Probe(False))
    assert CPU_INDEX in unreachable.why and "did not answer" in unreachable.why


def test_a_failed_install_stops_the_set_up(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """pip's failure is the set-up's: nothing claims torch was installed."""
    import subprocess

    import commands.install_torch as install_torch

    calls: list[list[str]] = []

    def pip_fails(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "")

    monkeypatch.setattr(install_torch.subprocess, "run", pip_fails)
    monkeypatch.setattr(install_torch, "cpu_index_answers", lambda: False)
    monkeypatch.setattr(Machine, "this", classmethod(lambda cls: X86_CPU))
    assert main(["--spec", "torch==2.12.0"]) == 1
    assert calls[0][-1] == "torch==2.12.0" and "--index-url" not in calls[0]
    out = capsys.readouterr().out
    assert "torch==2.12.0 from pip's own indexes" in out and "installed torch" not in out
