"""Where local training runs (``device``): the choice table, the refusals before start, Ray's
share of a GPU, the agent's own choice, and the CPU path end to end.

The choice table is tested with torch's checks patched; the rest on what this machine has
(the development machines have no GPU: the CUDA test runs only where there is one)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from client.agent import main as agent_main
from client.app import make_app
from commands import run as run_simulation
from common.accelerator import DEVICES, resolve
from common.settings import Settings
from testing.in_process import InProcessGrid
from tests.helpers import federation_settings, run_in_process

HAS_CUDA = torch.cuda.is_available()
HAS_MPS = torch.backends.mps.is_available()


def _machine(monkeypatch: pytest.MonkeyPatch, *, cuda: bool, mps: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(
    ("cuda", "mps", "picked"),
    [(True, True, "cuda"), (True, False, "cuda"), (False, True, "mps"), (False, False, "cpu")],
)
def test_auto_takes_cuda_then_mps_then_the_cpu(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, picked: str
) -> None:
    _machine(monkeypatch, cuda=cuda, mps=mps)
    assert resolve("auto") == torch.device(picked)


@pytest.mark.parametrize("choice", ["cuda", "mps"])
def test_an_accelerator_this_machine_lacks_is_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    _machine(monkeypatch, cuda=False, mps=False)
    with pytest.raises(ValueError, match=rf"^device = '{choice}', but this machine has none: "):
        resolve(choice)
    with pytest.raises(ValueError, match=rf"^--device = '{choice}'.*choose --device = 'auto'"):
        resolve(choice, key="--device")
    assert resolve("cpu") == torch.device("cpu")  # the CPU is always there


def test_an_explicit_choice_is_taken_where_the_machine_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, cuda=True, mps=True)
    assert {choice: resolve(choice).type for choice in DEVICES if choice != "auto"} == {
        "cpu": "cpu",
        "cuda": "cuda",
        "mps": "mps",
    }


def test_an_unknown_device_is_refused_by_the_settings_with_a_suggestion() -> None:
    with pytest.raises(ValueError, match=r"device = 'cdua' is not allowed \(did you mean 'cuda'"):
        federation_settings(device="cdua")


@pytest.mark.skipif(HAS_CUDA or HAS_MPS, reason="this machine has an accelerator")
def test_on_this_machine_without_an_accelerator_auto_is_the_cpu_and_cuda_is_refused() -> None:
    assert resolve("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="torch.cuda.is_available\\(\\) is False"):
        resolve("cuda")


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA on this machine")
def test_on_a_machine_with_cuda_auto_takes_it() -> None:
    assert resolve("auto") == torch.device("cuda")


@pytest.mark.usefixtures("no_superlink")
@pytest.mark.parametrize("choice", ["cuda", "mps"])
def test_the_launcher_refuses_a_missing_accelerator_before_anything_starts(
    choice: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _machine(monkeypatch, cuda=False, mps=False)
    results = tmp_path / "results"
    code = run_simulation.main(["--run-config", f"device={choice} results-dir={results}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"edgeflex: bad configuration: device = '{choice}', but this machine")
    assert "Traceback" not in err
    assert not results.exists()


def test_the_agent_refuses_a_missing_accelerator_at_its_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _machine(monkeypatch, cuda=False, mps=False)
    with pytest.raises(SystemExit) as exit_info:
        agent_main(["--insecure", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "--device = 'cuda', but this machine has none" in capsys.readouterr().err


def _gpus(settings: Settings) -> float | None:
    found = re.search(
        r"client-resources-num-gpus=(\S+)", run_simulation.federation_config(settings)
    )
    return None if found is None else float(found.group(1))


def test_simulated_clients_share_the_gpu_when_training_resolves_to_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _machine(monkeypatch, cuda=True, mps=False)
    assert _gpus(federation_settings(device="auto")) == 1 / run_simulation.LOCAL_CPUS
    assert _gpus(federation_settings(device="cuda")) == 1 / run_simulation.LOCAL_CPUS
    assert _gpus(federation_settings(device="cpu")) is None  # no GPU asked for
    _machine(monkeypatch, cuda=False, mps=True)
    assert _gpus(federation_settings(device="auto")) is None  # Ray does not manage MPS


@pytest.mark.usefixtures("task_identity")
def test_a_client_app_refuses_a_run_device_its_machine_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flower's own SuperNodes train where the run config says, and say so when their machine
    cannot."""
    _machine(monkeypatch, cuda=False, mps=False)
    with pytest.raises(ValueError, match="device = 'cuda', but this machine has none"):
        run_in_process(federation_settings(device="cuda"), rounds=1)


@pytest.mark.skipif(HAS_CUDA or HAS_MPS, reason="auto takes this machine's accelerator")
@pytest.mark.usefixtures("task_identity")
def test_auto_and_an_agents_own_device_train_exactly_as_the_cpu_on_a_cpu_machine() -> None:
    """The real CPU path: ``auto`` on this machine is the CPU, bit for bit; an agent's
    ``--device`` replaces the run's ``device`` (here one this machine lacks)."""
    on_cpu, _, _, cpu_rounds = run_in_process(federation_settings(device="cpu"), rounds=2)
    on_auto, _, _, auto_rounds = run_in_process(federation_settings(device="auto"), rounds=2)
    assert np.array_equal(on_auto, on_cpu)
    assert [r.train_loss for r in auto_rounds.values()] == [
        r.train_loss for r in cpu_rounds.values()
    ]
    run_asks_cuda = federation_settings(device="cuda")
    agents = InProcessGrid(run_asks_cuda, app=make_app(device="auto"))
    on_agents, *_ = run_in_process(run_asks_cuda, rounds=2, grid=agents)
    assert np.array_equal(on_agents, on_cpu)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA on this machine")
@pytest.mark.usefixtures("task_identity")
def test_on_cuda_clients_train_to_the_cpu_model_within_float_error() -> None:
    on_cpu, *_ = run_in_process(federation_settings(device="cpu"), rounds=2)
    on_cuda, *_ = run_in_process(federation_settings(device="cuda"), rounds=2)
    assert on_cuda.dtype == np.float32
    np.testing.assert_allclose(on_cuda, on_cpu, rtol=0, atol=1e-4)
