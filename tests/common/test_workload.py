import json
from pathlib import Path

import pytest
import torch
from torch import nn

from commands.run_config import parse_overrides, resolve_settings
from common.data import DIGITS_SPEC, DataSpec
from common.models import build_model
from common.settings import PROJECT_ROOT
from common.workload import check_workload, train_flops_per_sample
from server.records import read_rounds
from testing.in_process import InProcessGrid, run_server_app
from timing.devices import load_catalog


def test_mlp_flops_match_a_count_by_hand() -> None:
    """64-256-128-10: forward 2 x MACs; backward 2 x MACs for the weight gradients and 2 x the
    MACs of every layer but the first for the input gradients (the data needs none)."""
    layers = [(64, 256), (256, 128), (128, 10)]
    macs = sum(i * o for i, o in layers)
    expected = 2 * macs + 2 * macs + 2 * sum(i * o for i, o in layers[1:])
    model = build_model("mlp", DIGITS_SPEC, seed=0)
    assert train_flops_per_sample(model, DIGITS_SPEC) == expected == 269_824


def test_counting_leaves_the_model_untouched() -> None:
    model = build_model("resnet", DIGITS_SPEC, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flops = train_flops_per_sample(model, DIGITS_SPEC)
    assert flops > 100 * train_flops_per_sample(build_model("mlp", DIGITS_SPEC, 0), DIGITS_SPEC)
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], msg=key)
    assert all(p.grad is None for p in model.parameters())


def _records(tmp_path: Path, model: str) -> tuple[list[dict], dict]:
    overrides = parse_overrides(
        f"num-clients=2 num-server-rounds=2 seed=3 model={model} device-mix=all-ethernet "
        f"local-steps=2 results-dir={tmp_path / model}"
    )
    run_server_app(InProcessGrid(resolve_settings(overrides)))
    summary = json.loads((tmp_path / model / "summary.json").read_text())
    return read_rounds(tmp_path / model), summary


@pytest.mark.usefixtures("task_identity")
def test_virtual_compute_follows_the_models_counted_flops(tmp_path: Path) -> None:
    """Same devices, data and batches: a round's compute above its steps' overhead is in the
    ratio of the two models' training FLOPs, as counted and recorded in summary.json."""
    device = load_catalog(PROJECT_ROOT / "configs" / "devices.toml").presets["jetson-ethernet"]
    compute = {}
    flops = {}
    for model in ("mlp", "cnn"):
        rounds, summary = _records(tmp_path, model)
        workload = summary["workload"]
        assert workload["model"] == model
        assert workload["parameters"] == sum(
            p.numel() for p in build_model(model, DIGITS_SPEC, 3).parameters()
        )
        flops[model] = workload["train_flops_per_sample"]
        # every client is the same device: the round is its transfers plus its compute
        compute[model] = [r["round_time_s"] - r["comm_time_s"] for r in rounds]
    overhead_s = 2 * device.step_overhead_s
    for mlp_s, cnn_s in zip(compute["mlp"], compute["cnn"], strict=True):
        assert mlp_s > overhead_s
        assert (cnn_s - overhead_s) / (mlp_s - overhead_s) == pytest.approx(
            flops["cnn"] / flops["mlp"], rel=1e-9
        )
        # 2 steps of 32 samples at the device's FLOP/s
        assert mlp_s == pytest.approx(overhead_s + 64 * flops["mlp"] / device.train_flops_per_s)


class _WrongOutputs(nn.Module):
    def __init__(self, spec: DataSpec) -> None:
        super().__init__()
        self.linear = nn.Linear(spec.num_features, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def wrong_outputs(spec: DataSpec) -> nn.Module:
    return _WrongOutputs(spec)


def not_a_module(spec: DataSpec) -> object:
    return "a string"


def two_arguments(spec: DataSpec, seed: int) -> nn.Module:
    raise AssertionError("never called: it is not a model factory")


def small_model(spec: DataSpec) -> nn.Module:
    """A user's own model, as a factory the config names."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(spec.num_features, 32), nn.ReLU(), nn.Linear(32, spec.num_classes)
    )


def test_own_model_is_checked_and_counted() -> None:
    workload = check_workload("tests.common.test_workload:small_model", DIGITS_SPEC, seed=0)
    assert workload.parameters == 64 * 32 + 32 + 32 * 10 + 10
    assert workload.train_flops_per_sample == 2 * (64 * 32 + 32 * 10) * 2 + 2 * 32 * 10


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("tests.common.nowhere:model", r"model = 'tests.common.nowhere:model': cannot import"),
        ("tests.common.test_workload:absent", r"has no callable 'absent'"),
        ("tests.common.test_workload:not_a_module", r"returned str, not an nn.Module"),
        ("shutil:rmtree", r"'shutil' is Python's, not a model's module"),
        ("tests.common.test_workload:_WrongOutputs", r"not a function defined in"),
        ("tests.common.test_workload:DIGITS_SPEC", r"has no callable"),
        ("tests.common.test_workload:check_workload", r"not a function defined in 'tests.common"),
        ("tests.common.test_workload:two_arguments", r"one required argument .*\['spec', 'seed'\]"),
        (
            "tests.common.test_workload:wrong_outputs",
            r"gave outputs of shape \(4, 3\); expected \(4, 10\)",
        ),
    ],
)
def test_a_bad_own_model_is_refused_before_anything_starts(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_workload(name, DIGITS_SPEC, seed=0)


OWN_MODELS = """from torch import nn


def small_model(spec):
    return nn.Sequential(
        nn.Flatten(), nn.Linear(spec.num_features, 32), nn.ReLU(), nn.Linear(32, spec.num_classes)
    )
"""


@pytest.mark.usefixtures("task_identity")
def test_own_model_trains_a_federation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher's checks, then the real ServerApp and ClientApps with the user's model,
    from a module installed outside the project (one in it must be in the app bundle)."""
    installed = tmp_path / "site"
    installed.mkdir()
    (installed / "own_models.py").write_text(OWN_MODELS)
    monkeypatch.syspath_prepend(str(installed))
    rounds, summary = _records(tmp_path, "own_models:small_model")
    assert summary["workload"]["parameters"] == 64 * 32 + 32 + 32 * 10 + 10
    assert len(rounds) == 2 and all(r["num_clients"] == 2 for r in rounds)
    assert rounds[-1]["accuracy"] > 0.2  # 2 rounds x 2 steps from about 0.1 (10 classes)
