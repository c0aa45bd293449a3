"""benchmarks/attacks.py's grid is data (configs/measure/attacks.toml), checked when read."""

from pathlib import Path

import pytest

from benchmarks.attacks import load_grid, refusal_table, refusals
from common.flower_patches import set_task_identity
from common.settings import settings_with
from server.records import read_rounds
from testing.attacks import ATTACKS, AttackGrid
from testing.in_process import run_server_app


def test_the_shipped_grid_expands_its_groups() -> None:
    common, modes = load_grid()
    assert "num-server-rounds=150" in common
    assert modes["dense-injection"].attacks == ("inject",)
    single = modes["dense"].attacks
    assert {"flip", "collude-2", "absent-2"} <= set(single)
    assert all(attack in ATTACKS or attack.startswith(("collude", "absent")) for attack in single)


def test_an_unknown_attack_names_the_file_and_the_mode(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('[modes.m]\noverlay = ""\ndefences = ["none"]\nattacks = ["flop"]\n')
    with pytest.raises(SystemExit, match=r"grid.toml: modes.m.attacks: unknown attack 'flop'"):
        load_grid(grid)


def test_a_defence_that_is_not_one_names_the_file_and_the_mode(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text('[modes.m]\noverlay = ""\ndefences = ["moat"]\nattacks = ["flip"]\n')
    with pytest.raises(SystemExit, match=r"grid.toml: modes.m.defences: \['moat'\] is not a list"):
        load_grid(grid)


def test_refusals_count_what_each_round_received_and_the_first_round_refusing() -> None:
    rounds = [
        {"round": 1, "num_clients": 10, "refused": []},
        {"round": 2, "num_clients": 8, "refused": ["node 3: screened", "node 4 (values): x"]},
        {"round": 3, "num_clients": 9, "refused": ["node 3: screened", "node 3 (values): y"]},
        {"round": 4, "num_clients": 10, "refused": ["round 4: not finite; not applied"]},
    ]
    assert refusals(rounds) == (3, 40, 2)  # node 3 once in round 3; round 4's is no reply
    assert refusals(rounds[:1]) == (0, 10, None)


def test_the_refusal_table_sets_each_defence_beside_robust_none() -> None:
    def row(defence: str, seed: int, a20: float, refused: int, first: int | None) -> dict:
        return {
            "mode": "honest-x",
            "attack": "clean",
            "defence": defence,
            "seed": seed,
            "a20": a20,
            "refused": refused,
            "replies": 1500,
            "first_refused": first,
        }

    rows = [
        row("none", 42, 0.90, 0, None),
        row("none", 7, 0.92, 0, None),
        row("clip-screen", 42, 0.88, 30, 24),
        row("clip-screen", 7, 0.90, 0, None),
        {**row("clip-screen", 42, 0.1, 0, None), "attack": "flip"},  # not a clean run
    ]
    lines = refusal_table(rows).splitlines()
    screen = next(line for line in lines if "| clip-screen |" in line)
    assert "30 of 3000 (1.00 %)" in screen
    assert "7: -, 42: 24" in screen
    assert "0.8900" in screen and "-2.00 points" in screen


@pytest.mark.slow  # two rounds of the ServerApp in process: 4-10 s
def test_the_attack_grid_rewrites_replies_through_the_serverapps_packed_messages(
    tmp_path: Path,
) -> None:
    """The ServerApp packs what it sends and the ClientApp what it answers (packed-messages,
    the default): the attacker's reply is rewritten all the same and refused for it."""
    settings = settings_with(
        num_clients=3, num_server_rounds=2, results_dir=str(tmp_path / "run"), seed=5
    )
    assert settings.deployment.packed_messages
    restore = set_task_identity()
    try:
        run_server_app(AttackGrid(settings, "examples"))  # num-examples 10**12 from node 100
    finally:
        restore()
    rounds = read_rounds(tmp_path / "run")
    assert [len(r["refused"]) for r in rounds] == [1, 1]
    assert all("num-examples" in r["refused"][0] for r in rounds)
