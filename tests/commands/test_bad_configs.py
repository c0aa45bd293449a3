"""A bad configuration stops the launcher before anything starts, naming the key (and the
file:line of a file at fault): exit 2, no traceback, nothing written; ``--check`` refuses it
alike and accepts every run-config preset of configs/."""

import importlib
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands import run as run_simulation
from commands.run import FLWR_DIR
from commands.run_config import parse_overrides, resolve_settings
from common.settings import PROJECT_ROOT, Settings
from tests.helpers import trace_line


def _networks(tmp_path: Path, *rows: tuple[float, ...]) -> str:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(trace_line(*row) for row in rows))
    networks = tmp_path / "networks.toml"
    networks.write_text(f'[network.t]\nkind = "trace"\nfile = "{trace}"\n')
    return f"num-clients=3 network=t networks-file={networks}"


BESIDE_THE_MAKEFILE = "edgeflex_bad_config_model"


def _module_beside_the_makefile(tmp_path: Path) -> str:
    """Written beside the Makefile for the one test (removed by ``_project_files``)."""
    module = PROJECT_ROOT / f"{BESIDE_THE_MAKEFILE}.py"
    module.write_text("from torch import nn\n\n\ndef small(spec):\n    return nn.Flatten()\n")
    importlib.invalidate_caches()
    return f"model={BESIDE_THE_MAKEFILE}:small"


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("")
    return path


def _preset(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return str(path)


# name -> (the run config, made in a temporary directory; the key its message names; a regex
# of the message)
CASES = {
    "preset with a TOML syntax error": (
        lambda tmp: _preset(tmp, 'collective = "allgather"\ncompression-ratio = = 0.1\n'),
        "preset",
        r"preset .*bad\.toml: .*\(at line 2, column",
    ),
    "a preset that is not there": (lambda tmp: "configs/nope.toml", "preset", r"not found"),
    "text that is not key=value": (lambda tmp: "seed 3", "run-config", r"cannot parse"),
    "trace client nan": (
        lambda tmp: _networks(tmp, (1, 0, 1, 1, 1), (1, math.nan, 1, 1, 1)),
        "networks-file",
        r"trace\.jsonl:2: field 'client' = nan is not an integer",
    ),
    "trace round inf": (
        lambda tmp: _networks(tmp, (math.inf, 0, 1, 1, 1)),
        "networks-file",
        r"trace\.jsonl:1: field 'round' = inf is not an integer",
    ),
    "trace rows going back": (
        lambda tmp: _networks(tmp, (5, 0, 1, 1, 1), (2, 0, 1, 1, 1)),
        "networks-file",
        r"trace\.jsonl:2: round 2 of client 0 is not after its previous row \(round 5\)",
    ),
    "trace rows repeated": (
        lambda tmp: _networks(tmp, (5, 1, 1, 1, 1), (5, 1, 2, 2, 2)),
        "networks-file",
        r"trace\.jsonl:2: round 5 of client 1 is not after its previous row",
    ),
    "cr-min above cr-max": (
        lambda tmp: "collective=allgather cr-schedule=nsga2 cr-min=0.2 cr-max=0.1",
        "cr-min",
        r"cr-min \(0\.2\) must be below cr-max \(0\.1\)",
    ),
    "an unknown encoding": (
        lambda tmp: "collective=allgather encoding=gzip",
        "encoding",
        r"encoding = 'gzip' is not allowed; allowed values: float32, int8, sign, qsgd",
    ),
    "a config of the old keys": (
        lambda tmp: "strategy=topk compressor=topk-q8",
        "compressor",
        r"2 problems in the run config:\n- compressor is gone: .* use encoding = 'int8'",
    ),
    "an old key renamed": (
        lambda tmp: "topk-dense-vectors=true",
        "whole-vectors",
        r"topk-dense-vectors is now whole-vectors",
    ),
    "a typo inside auto-collectives": (
        lambda tmp: "collective=auto auto-collectives=allreduce,alllgather",
        "auto-collectives",
        r"auto-collectives = 'allreduce,alllgather': name each of allgather, allreduce, powersgd",
    ),
    "a ramp between 0 and 1": (
        lambda tmp: "collective=auto cr-schedule=nsga2 cr-ratio-ramp=0.25",
        "cr-ratio-ramp",
        r"cr-ratio-ramp must be 0 \(no limit\) or >= 1, got 0.25",
    ),
    "a hub dataset with no network": (
        lambda tmp: "dataset=ylecun/mnist",
        "dataset",
        r"dataset = 'ylecun/mnist' is not a local data set.*cannot be reached.*Run once where",
    ),
    "a model module beside the Makefile": (
        _module_beside_the_makefile,
        "model",
        r"model = 'edgeflex_bad_config_model:small': edgeflex_bad_config_model\.py is not in the "
        r"app bundle .*fab-include",
    ),
    "a model module of the project outside the bundle": (
        lambda tmp: "model=tests.helpers:reply_message",
        "model",
        r"tests/helpers\.py is not in the app bundle",
    ),
    "a model module that cannot be imported": (
        lambda tmp: "model=nosuch.module:factory",
        "model",
        r"cannot import 'nosuch\.module'",
    ),
    "a model factory that is not there": (
        lambda tmp: "model=common.models:nope",
        "model",
        r"'common\.models' has no callable 'nope'",
    ),
    "a model from Python's library": (
        lambda tmp: "model=os:getcwd",
        "model",
        r"'os' is Python's, not a model's module",
    ),
    "a cnn on 1-D signals": (lambda tmp: "dataset=mnist1d model=cnn", "model", r"2 x 2 pixels"),
    "a typo in a key": (
        lambda tmp: "num-client=3",
        "num-client",
        r"unknown run-config key 'num-client'; did you mean 'num-clients'\?",
    ),
    "a key in Python's spelling": (
        lambda tmp: "learning_rate=0.1",
        "learning_rate",
        r"did you mean 'learning-rate'\?",
    ),
    "a misspelt key and two bad values at once": (
        lambda tmp: "compresion-ratio=0.1 seed=-1 collective=alllgather",
        "compresion-ratio",
        r"3 problems in the run config:\n.*did you mean 'compression-ratio'\?.*\n- seed must be "
        r">= 0.*\n- collective = 'alllgather' is not allowed \(did you mean 'allgather'\?\)",
    ),
    "a fractional client count": (
        lambda tmp: "num-clients=1.5",
        "num-clients",
        r"num-clients must be an integer, got 1\.5",
    ),
    "no rounds": (lambda tmp: "num-server-rounds=0", "num-server-rounds", r"must be >= 1"),
    "a word for a number": (
        lambda tmp: "learning-rate=fast",
        "learning-rate",
        r"learning-rate must be a number, got 'fast'",
    ),
    "a number for a bool": (
        lambda tmp: "whole-vectors=1",
        "whole-vectors",
        r"whole-vectors must be true or false",
    ),
    "a ratio above 1": (
        lambda tmp: "compression-ratio=1.5",
        "compression-ratio",
        r"compression-ratio must be <= 1",
    ),
    "a ratio of 0": (lambda tmp: "compression-ratio=0", "compression-ratio", r"must be > 0"),
    "all data held out": (lambda tmp: "test-fraction=1", "test-fraction", r"must be < 1"),
    "no dirichlet spread": (lambda tmp: "dirichlet-alpha=0", "dirichlet-alpha", r"must be > 0"),
    "momentum of 1": (lambda tmp: "server-momentum=1", "server-momentum", r"must be < 1"),
    "trimming half": (lambda tmp: "robust-trim=0.5", "robust-trim", r"must be < 0\.5"),
    "no round timeout": (lambda tmp: "round-timeout-s=0", "round-timeout-s", r"must be > 0"),
    "a population too small": (lambda tmp: "cr-population=3", "cr-population", r"must be >= 4"),
    "a clock mode that is not one": (
        lambda tmp: "timing=wall",
        "timing",
        r"timing = 'wall' is not allowed; allowed values: modelled, measured",
    ),
    "a collective typo": (
        lambda tmp: "collective=alllgather",
        "collective",
        r"did you mean 'allgather'\?",
    ),
    "an unknown partitioner": (lambda tmp: "partitioner=random", "partitioner", r"not allowed"),
    "an unknown model": (lambda tmp: "model=resnet50", "model", r"did you mean 'resnet'\?"),
    "a selector typo": (lambda tmp: "selector=top-k", "selector", r"did you mean 'topk'\?"),
    "an unknown schedule": (lambda tmp: "cr-schedule=nsga3", "cr-schedule", r"'nsga2'"),
    "an unknown defence": (lambda tmp: "robust=median-of-means", "robust", r"not allowed"),
    "an unknown server optimizer": (
        lambda tmp: "server-optimizer=lbfgs",
        "server-optimizer",
        r"allowed values: sgd, fedavgm",
    ),
    "an unknown state store": (lambda tmp: "state-store=ssd", "state-store", r"not allowed"),
    "an unknown topology": (lambda tmp: "topology=mesh", "topology", r"not allowed"),
    "an unknown leader": (lambda tmp: "leader=ring", "leader", r"allowed values: star"),
    "more clients a round than clients": (
        lambda tmp: "num-clients=10 clients-per-round=20",
        "clients-per-round",
        r"clients-per-round \(20\) exceeds num-clients \(10\)",
    ),
    "a minimum above all clients": (
        lambda tmp: "num-clients=10 min-clients=11",
        "min-clients",
        r"exceeds num-clients",
    ),
    "injection half on": (
        lambda tmp: "injection-alpha=0.5",
        "injection-alpha",
        r"both 0 \(off\) or both > 0",
    ),
    "batch bounds crossed": (
        lambda tmp: "batch-min=64 batch-max=32",
        "batch-min",
        r"batch-min \(64\) must not exceed batch-max \(32\)",
    ),
    "a diagnosis without a validation split": (
        lambda tmp: "batch-norm-diagnosis=true",
        "validation-fraction",
        r"needs validation-fraction > 0",
    ),
    "a relative state store directory": (
        lambda tmp: "state-store-dir=relative/dir",
        "state-store-dir",
        r"must be an absolute path",
    ),
    "a broker that is not host:port": (
        lambda tmp: "wake-broker=nohost",
        "wake-broker",
        r"is not host:port",
    ),
    "stream rates that are no preset": (
        lambda tmp: "stream-rates=bogus",
        "stream-rates",
        r"allowed values: off, S1",
    ),
    "synthetic data split by a partitioner": (
        lambda tmp: "dataset=synthetic partitioner=dirichlet",
        "partitioner",
        r"dataset = 'synthetic' is generated per client",
    ),
    "an unknown device mix": (
        lambda tmp: "device-mix=moon",
        "device-mix",
        r"device-mix = 'moon' is not defined",
    ),
    "an unknown network": (lambda tmp: "network=moon", "network", r"is not defined"),
    "a devices file that is not there": (
        lambda tmp: f"devices-file={tmp / 'nope.toml'}",
        "devices-file",
        r"cannot read devices file",
    ),
    "a data file that is not there": (
        lambda tmp: f"dataset=npz:{tmp / 'missing.npz'}",
        "dataset",
        r"missing\.npz: cannot read as \.npz",
    ),
    "a run to resume with no checkpoint": (
        lambda tmp: f"resume-from={tmp}",
        "resume-from",
        r"resume-from: no checkpoint at",
    ),
    "a results directory under a file": (
        lambda tmp: f"results-dir={_file(tmp)}/run",
        "results-dir",
        r"cannot be made: .* is not a directory",
    ),
    "a value flwr run cannot take": (
        lambda tmp: f"results-dir='{tmp}/a\"b'",
        "results-dir",
        r"results-dir = .*: a string may not contain quotes or backslashes",
    ),
}


def test_there_are_forty_of_them_the_issues_five_among_them() -> None:
    assert len(CASES) >= 40
    assert {
        "a typo inside auto-collectives",
        "a ramp between 0 and 1",
        "a hub dataset with no network",
        "a model module beside the Makefile",
    } <= set(CASES)  # the fifth, num-clients above the simulated nodes: the ServerApp's check


@pytest.fixture
def _project_files() -> Iterator[None]:
    yield
    (PROJECT_ROOT / f"{BESIDE_THE_MAKEFILE}.py").unlink(missing_ok=True)


@pytest.mark.usefixtures("no_hub", "_project_files", "no_superlink")
@pytest.mark.parametrize("case", list(CASES))
def test_bad_configuration_fails_before_anything_starts(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    make, key, message = CASES[case]
    config = make(tmp_path)
    if "results-dir=" not in config:
        config += f" results-dir={tmp_path / 'results'}"
    made, flower_state = sorted(tmp_path.rglob("*")), _listing(FLWR_DIR)
    for argv in (["--check"], []):  # --check refuses it as the run does
        code = run_simulation.main([*argv, "--run-config", config])
        out, err = capsys.readouterr()
        assert code == 2
        assert err.startswith("edgeflex: bad configuration: ")
        assert key in err
        assert "Traceback" not in err + out
        assert re.search(message, err, re.DOTALL), err
    assert sorted(tmp_path.rglob("*")) == made  # nothing was written either: no results
    assert _listing(FLWR_DIR) == flower_state  # and no Flower state


def _listing(path: Path) -> list[Path]:
    return sorted(path.iterdir()) if path.is_dir() else []


@pytest.mark.usefixtures("no_superlink")
def test_check_prints_every_resolved_key_by_section_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    code = run_simulation.main(
        ["--check", "--run-config", f"configs/scadles.toml seed=7 results-dir={results}"]
    )
    out = capsys.readouterr().out
    assert code == 0 and not results.exists()
    sections = [line[2:] for line in out.splitlines()[1:] if line.startswith("# ")]
    assert sections == list(Settings.model_fields)
    # what it prints is a preset: read back, it is the resolved configuration
    printed = tmp_path / "printed.toml"
    printed.write_text(out)
    assert (
        parse_overrides(str(printed))
        == resolve_settings(
            parse_overrides(f"configs/scadles.toml seed=7 results-dir={results}")
        ).to_run_config()
    )


def _run_configs() -> list[Path]:
    """The files of configs/ that are run configs: their keys are run-config keys (the
    devices and networks files are tables of presets; configs/compare holds comparisons)."""
    keys = set(Settings.keys())
    return [
        path
        for path in sorted((PROJECT_ROOT / "configs").glob("*.toml"))
        if set(parse_overrides(str(path))) <= keys
    ]


def test_the_run_configs_of_configs_are_found() -> None:
    names = {path.name for path in _run_configs()}
    assert {"flagship.toml", "scadles.toml", "dsgd.toml"} <= names
    assert not names & {"devices.toml", "networks.toml"}


@pytest.mark.parametrize("preset", _run_configs(), ids=lambda path: path.name)
def test_check_accepts_every_run_config_preset(
    preset: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    code = run_simulation.main(["--check", "--run-config", f"{preset} results-dir={results}"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f'results-dir = "{results}"' in captured.out
    assert not results.exists()
