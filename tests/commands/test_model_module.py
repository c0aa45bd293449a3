"""A ``package.module:factory`` model is imported the way the ServerApp imports it: from the
app bundle or the environment. Where the module lives decides, not whether this process can
import it."""

import importlib
import sys
from pathlib import Path

import pytest

from commands.run_config import check_model_module
from common.settings import ConfigError

FACTORY = "def small(spec):\n    return None\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose bundle holds ``mine/``; importable, as the launcher's is."""
    root = tmp_path / "project"
    (root / "mine").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[tool.flwr.app]\nfab-include = ["mine/**/*.py"]\n')
    (root / "mine" / "__init__.py").write_text("")
    (root / "mine" / "models.py").write_text(FACTORY)
    (root / "mine" / "test_models.py").write_text(FACTORY)
    (root / "loose.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(root))
    for name in [n for n in sys.modules if n.split(".")[0] == "mine"]:  # another test's project
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    return root


def test_a_module_the_bundle_holds_passes(project: Path) -> None:
    check_model_module("mine.models:small", project)
    check_model_module("mlp", project)  # the registry's names are not modules


@pytest.mark.parametrize(
    ("model", "file"),
    [("loose:small", "loose.py"), ("mine.test_models:small", "mine/test_models.py")],
)
def test_a_module_of_the_project_outside_the_bundle_is_refused_naming_the_file(
    project: Path, model: str, file: str
) -> None:
    # a test_*.py file: Flower's own rules leave it out of every bundle
    with pytest.raises(ConfigError, match=f"{file} is not in the app bundle.*fab-include"):
        check_model_module(model, project)


def test_a_module_found_through_the_current_directory_only_is_refused(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = tmp_path / "elsewhere"
    here.mkdir()
    (here / "nearby.py").write_text(FACTORY)
    monkeypatch.chdir(here)
    monkeypatch.syspath_prepend(str(here))  # as python -m puts the current directory first
    importlib.invalidate_caches()
    with pytest.raises(ConfigError, match="through the current directory only"):
        check_model_module("nearby:small", project)


def test_an_installed_package_and_a_missing_module_pass_to_the_import_check(
    project: Path,
) -> None:
    check_model_module("torch.nn:Linear", project)  # site-packages: every process sees it
    check_model_module("nosuch.module:factory", project)  # check_model names the import error
