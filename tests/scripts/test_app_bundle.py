"""The staged app builds the very FAB that ``flwr run`` builds from the project itself."""

from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk

from common.settings import PROJECT_ROOT
from scripts.app_bundle import bundled_dirs, stage_app

# Flower's FAB filter uses a pattern class that pathspec has deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:GitWildMatchPattern:DeprecationWarning")


def test_the_staged_app_builds_the_projects_fab_byte_for_byte(tmp_path: Path) -> None:
    staged = stage_app(tmp_path / "app")
    assert not (staged / "tests").exists() and not (staged / "results").exists()
    assert build_fab_from_disk(staged) == build_fab_from_disk(PROJECT_ROOT)


def test_a_fab_include_pattern_without_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.flwr.app]\nfab-include = ["client/**/*.py", "*.py"]\n'
    )
    with pytest.raises(ValueError, match="every fab-include pattern names a directory"):
        bundled_dirs(tmp_path)
