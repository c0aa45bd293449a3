"""The config-error benchmark refuses each bad config as a user's command line would see it:
in a fresh process, exit 2, the key named, no traceback, nothing written; and it prints the
wall time of each (measured, never asserted: the figure comes from a quiet machine)."""

import re
import subprocess
import sys

import pytest

from common.settings import PROJECT_ROOT

HANDFUL = ["auto-collectives typo", "hub dataset, no network", "model beside the Makefile"]


@pytest.mark.slow
def test_a_handful_of_bad_configs_are_refused_in_a_fresh_process_each() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_config_errors", "--only", *HANDFUL],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in HANDFUL:
        row = re.search(
            rf"^{re.escape(name)} +2 +yes +no +no +(\d+\.\d\d) +\d+\.\d\d$", done.stdout, re.M
        )
        assert row is not None, done.stdout
        assert float(row.group(1)) > 0  # its wall time was observed and printed
    assert "largest wall time: " in done.stdout
    assert not (PROJECT_ROOT / "edgeflex_bench_model.py").exists()  # removed after
