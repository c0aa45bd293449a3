"""benchmarks/attacks.py's grid is data (configs/measure/attacks.toml), checked when read."""

from pathlib import Path

import pytest

from benchmarks.attacks import load_grid
from testing.attacks import ATTACKS


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
