"""A bad configuration stops the launcher before anything starts, naming file:line or key."""

import math
import re
from pathlib import Path

import pytest

from commands import run as run_simulation
from tests.helpers import trace_line


def _networks(tmp_path: Path, *rows: tuple[float, ...]) -> str:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(trace_line(*row) for row in rows))
    networks = tmp_path / "networks.toml"
    networks.write_text(f'[network.t]\nkind = "trace"\nfile = "{trace}"\n')
    return f"num-clients=3 network=t networks-file={networks}"


CASES = {
    "preset with a TOML syntax error": (
        lambda tmp: _preset(tmp, 'collective = "allgather"\ncompression-ratio = = 0.1\n'),
        r"preset .*bad\.toml: .*\(at line 2, column",
    ),
    "trace client nan": (
        lambda tmp: _networks(tmp, (1, 0, 1, 1, 1), (1, math.nan, 1, 1, 1)),
        r"trace\.jsonl:2: field 'client' = nan is not an integer",
    ),
    "trace round inf": (
        lambda tmp: _networks(tmp, (math.inf, 0, 1, 1, 1)),
        r"trace\.jsonl:1: field 'round' = inf is not an integer",
    ),
    "trace rows going back": (
        lambda tmp: _networks(tmp, (5, 0, 1, 1, 1), (2, 0, 1, 1, 1)),
        r"trace\.jsonl:2: round 2 of client 0 is not after its previous row \(round 5\)",
    ),
    "trace rows repeated": (
        lambda tmp: _networks(tmp, (5, 1, 1, 1, 1), (5, 1, 2, 2, 2)),
        r"trace\.jsonl:2: round 5 of client 1 is not after its previous row",
    ),
    "cr-min above cr-max": (
        lambda tmp: "collective=allgather cr-schedule=nsga2 cr-min=0.2 cr-max=0.1",
        r"cr-min \(0\.2\) must be below cr-max \(0\.1\)",
    ),
    "an unknown encoding": (
        lambda tmp: "collective=allgather encoding=gzip",
        r"encoding = 'gzip' is not allowed; allowed values: float32, int8, sign, qsgd",
    ),
    "a config of the old keys": (
        lambda tmp: "strategy=topk compressor=topk-q8",
        r"2 problems in the run config:\n- compressor is gone: .* use encoding = 'int8'",
    ),
    "a typo inside auto-collectives": (
        lambda tmp: "collective=auto auto-collectives=allreduce,alllgather",
        r"auto-collectives = 'allreduce,alllgather': name each of allgather, allreduce, powersgd",
    ),
    "a ramp between 0 and 1": (
        lambda tmp: "collective=auto cr-schedule=nsga2 cr-ratio-ramp=0.25",
        r"cr-ratio-ramp must be 0 \(no limit\) or >= 1, got 0.25",
    ),
}


def _preset(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_configuration_fails_before_anything_starts(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_superlink(*args: object, **kwargs: object) -> None:
        raise AssertionError("a SuperLink was started for a bad configuration")

    monkeypatch.setattr(run_simulation, "local_superlink", no_superlink)
    make, message = CASES[case]
    results = tmp_path / "results"
    code = run_simulation.main(["--run-config", f"{make(tmp_path)} results-dir={results}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("edgeflex: bad configuration: ")
    assert "Traceback" not in err
    assert re.search(message, err), err
    assert not results.exists()  # nothing was written either
