"""The staged app builds the very FAB that ``flwr run`` builds from the project itself."""

from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk

from commands.app_bundle import bundled_dirs, stage_app
from common.settings import PROJECT_ROOT

# Flower's FAB filter uses a pattern class that pathspec has deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")


def test_the_staged_app_builds_the_projects_fab_byte_for_byte(tmp_path: Path) -> None:
    stale = tmp_path / "app" / "client" / "deleted_from_the_project.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("x = 1\n")
    staged = stage_app(tmp_path / "app")
    assert not stale.exists()
    assert not (staged / "tests").exists() and not (staged / "results").exists()
    assert build_fab_from_disk(staged) == build_fab_from_disk(PROJECT_ROOT)


@pytest.mark.parametrize("pattern", ["*.py", "**/*.py", "./client/*.py", "../x/*.py", "nope/*.py"])
def test_a_fab_include_pattern_that_names_no_directory_is_refused(
    tmp_path: Path, pattern: str
) -> None:
    (tmp_path / "client").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.flwr.app]\nfab-include = ["client/**/*.py", "{pattern}"]\n'
    )
    with pytest.raises(ValueError, match="must start with the name of a directory"):
        bundled_dirs(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.flwr.app]\n")
    with pytest.raises(ValueError, match="has no fab-include"):
        bundled_dirs(tmp_path)
