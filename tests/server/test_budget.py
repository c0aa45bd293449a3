"""virtual-time-budget-s: a run stops after the first round that ends at or past the budget,
and its rounds are those of the same run without a budget, up to there."""

from pathlib import Path

import pytest

from commands.run_config import parse_overrides, resolve_settings
from server.records import read_rounds, without_wall_clock
from testing.in_process import InProcessGrid, run_server_app

pytestmark = pytest.mark.usefixtures("task_identity")

RUN = "num-clients=3 num-server-rounds=6 seed=5 collective=allgather compression-ratio=0.05"


def _rounds(text: str, results_dir: Path) -> list[dict[str, object]]:
    overrides = parse_overrides(text) | {"results-dir": str(results_dir)}
    run_server_app(InProcessGrid(resolve_settings(overrides)))
    return [without_wall_clock(row) for row in read_rounds(results_dir)]


def test_a_budget_ends_the_run_at_the_first_round_past_it(tmp_path: Path) -> None:
    full = _rounds(RUN, tmp_path / "full")
    assert len(full) == 6
    # A budget between the ends of rounds 3 and 4: round 4 is the last.
    budget = (full[2]["virtual_time_s"] + full[3]["virtual_time_s"]) / 2  # type: ignore[operator]
    cut = _rounds(f"{RUN} virtual-time-budget-s={budget}", tmp_path / "cut")
    assert cut == full[:4]
    # Exactly the end of round 2: round 2 is the last; a budget past the end: the cap.
    at = _rounds(f"{RUN} virtual-time-budget-s={full[1]['virtual_time_s']}", tmp_path / "at")
    assert at == full[:2]
    past = _rounds(f"{RUN} virtual-time-budget-s=1e6", tmp_path / "past")
    assert past == full
