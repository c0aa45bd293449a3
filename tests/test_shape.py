"""The shape of the code: what a device's ClientApp loads, and which package imports which."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.settings import PROJECT_ROOT

PRODUCT = ("common", "wire", "compress", "timing", "strategies", "server", "client", "commands")
TOOLS = ("benchmarks", "testing")  # measurement tools, and what tests and benchmarks share
PACKAGES = (*PRODUCT, *TOOLS)
# Server-side code and libraries a ClientApp never needs: Flower starts one ClientApp process
# per message, so each of these would cost every round on a Pi (pymoo, scikit-learn, datasets
# and flwr-datasets with its plotting stack take seconds to import).
NOT_ON_A_DEVICE = (
    "server",
    "timing",
    "commands",
    "benchmarks",
    "testing",
    "strategies.acceptance",
    "strategies.edge",
    "strategies.instructions",
    "strategies.ledger",
    "strategies.membership",
    "strategies.policies",
    "strategies.relay",
    "strategies.replicas",
    "strategies.round_state",
    "strategies.step",
    "pymoo",
    "sklearn",
    "datasets",
    "flwr_datasets",
    "matplotlib",
)
# ... except the collectives' cost models: pure functions a collective's module builds its
# tables from (timing/__init__ imports nothing)
ON_A_DEVICE_TOO = ("timing", "timing.cost")


@pytest.mark.slow  # a child Python imports the ClientApp
def test_the_client_app_loads_no_server_side_module() -> None:
    code = "import sys, client.app; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    loaded = out.stdout.split()
    assert "strategies.collectives.allreduce" in loaded  # the client halves are there
    offending = [
        m
        for m in loaded
        if any(m == p or m.startswith(p + ".") for p in NOT_ON_A_DEVICE)
        and m not in ON_A_DEVICE_TOO
    ]
    assert offending == []


def _imports(path: Path) -> set[str]:
    """Top-level packages of ours that a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES}
    return found


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for package in PACKAGES:
        for path in (PROJECT_ROOT / package).rglob("*.py"):
            graph[package] |= _imports(path) - {package}
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return False


def test_no_package_imports_another_in_a_circle() -> None:
    graph = package_graph()
    cycles = [(a, b) for a in graph for b in graph[a] if _reaches(graph, b, a)]
    assert cycles == [], f"package import cycles through {cycles}"
    # The layers, bottom up: the wire owns nothing of ours; a device needs no server package.
    assert graph["wire"] == set()
    assert graph["compress"] == {"wire"}
    assert not {"server", "timing", "commands"} & graph["client"]


def test_no_product_package_imports_a_measurement_tool_or_the_test_harness() -> None:
    graph = package_graph()
    assert {p: graph[p] & set(TOOLS) for p in PRODUCT if graph[p] & set(TOOLS)} == {}


def _lines(package: str) -> int:
    return sum(
        len(path.read_text().splitlines())
        for path in (PROJECT_ROOT / package).rglob("*.py")
        if "fedavg_app" not in path.parts  # a Flower app of its own, a benchmark's yardstick
    )


def test_no_package_holds_more_than_a_quarter_of_the_code() -> None:
    lines = {package: _lines(package) for package in PACKAGES}
    total = sum(lines.values())
    assert {p: n for p, n in lines.items() if n > total / 4} == {}


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _reaches(graph, "b", "a") and not _reaches(graph, "a", "d")


# Each collective's name is spelled in its own module (and where users spell it: settings, the
# configs, the docs); everywhere else reads it from the collective.
COLLECTIVE_MODULES = {
    "allgather": "strategies/collectives/allgather.py",
    "allreduce": "strategies/collectives/allreduce.py",
    "powersgd": "strategies/collectives/powersgd.py",
}
NAME_WORD = re.compile(r"\b(" + "|".join(COLLECTIVE_MODULES) + r")\b")


def _named_outside_their_modules(paths: list[Path], root: Path = PROJECT_ROOT) -> list[str]:
    """String literals (not docstrings) that spell a collective's name outside its module."""
    found = []
    for path in paths:
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docstrings:
                continue
            names = {m.group(1) for m in NAME_WORD.finditer(node.value)}
            if any(COLLECTIVE_MODULES[name] != where for name in names):
                found.append(f"{where}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_collective_names_are_spelled_only_in_their_own_modules() -> None:
    """Settings (common/settings.py, configs/) and docs may name them; code asks the table."""
    paths = [
        path
        for package in PACKAGES
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if path != PROJECT_ROOT / "common" / "settings.py"
    ]
    assert _named_outside_their_modules(paths) == []


def test_the_name_check_finds_a_name(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text('"""Docs may say allgather."""\nCHOICE = "allreduce"\n')
    assert _named_outside_their_modules([stray], root=tmp_path) == ["stray.py:2: 'allreduce'"]


# Flower's internals are changed in common/flower_patches.py only: an assignment to an
# attribute of anything imported from flwr, or a setattr on it, anywhere else is a patch.
PATCHES_MODULE = "common/flower_patches.py"


def _flower_patches(path: Path, root: Path = PROJECT_ROOT) -> list[str]:
    tree = ast.parse(path.read_text())
    flower_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            flower_names |= {
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("flwr")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flwr"):
            flower_names |= {a.asname or a.name for a in node.names}

    def flower_rooted(target: ast.expr) -> bool:
        while isinstance(target, ast.Attribute | ast.Subscript):
            target = target.value
        return isinstance(target, ast.Name) and target.id in flower_names

    def elements(target: ast.expr) -> list[ast.expr]:
        if isinstance(target, ast.Tuple | ast.List):
            return [e for element in target.elts for e in elements(element)]
        return [target]

    def is_setattr(func: ast.expr) -> bool:  # setattr, delattr, monkeypatch.setattr, __setattr__
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name.strip("_") in {"setattr", "delattr", "setitem"}

    where = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and is_setattr(node.func)
            and node.args
            and flower_rooted(node.args[0])
        ):
            found.append(f"{where}:{node.lineno}")
        targets = [e for target in targets for e in elements(target)]
        if any(isinstance(e, ast.Attribute | ast.Subscript) and flower_rooted(e) for e in targets):
            found.append(f"{where}:{node.lineno}")
    return sorted(found, key=lambda f: int(f.rsplit(":", 1)[1]))


def test_flower_is_patched_in_one_module_only() -> None:
    paths = [
        path
        for package in PACKAGES
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if path.relative_to(PROJECT_ROOT).as_posix() != PATCHES_MODULE
    ]
    assert [found for path in paths for found in _flower_patches(path)] == []


def test_the_patch_check_finds_a_patch(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text(
        "from flwr.supercore.task_identity import TaskIdentity\n"
        "import flwr.supernode.start_client_internal as loop\n"
        "TaskIdentity._run_id = 1\n"
        "loop.time = None\n"
        "setattr(TaskIdentity, '_node_id', 1)\n"
        "other = object()\n"
        "del TaskIdentity._task_id\n"
        "(a, [b, loop.sleep]) = 1, [2, 3]\n"
        "object.__setattr__(TaskIdentity, '_run_id', 2)\n"
        "other.x = 1\n"
    )
    assert _flower_patches(stray, root=tmp_path) == [
        "stray.py:3",
        "stray.py:4",
        "stray.py:5",
        "stray.py:7",
        "stray.py:8",
        "stray.py:9",
    ]


def _private_test_imports(path: Path, root: Path) -> list[str]:
    """Underscored names a test file imports from a test module (tests/**/test_*.py)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.")):
            continue
        if not node.module.rsplit(".", 1)[-1].startswith("test_"):  # type: ignore[union-attr]
            continue
        found += [
            f"{path.relative_to(root).as_posix()}: {node.module}.{a.name}"
            for a in node.names
            if a.name.startswith("_")
        ]
    return found


def test_tests_import_no_private_helper_of_another_test_module() -> None:
    tests = PROJECT_ROOT / "tests"
    found = [f for path in sorted(tests.rglob("*.py")) for f in _private_test_imports(path, tests)]
    assert found == [], "shared helpers belong in tests/helpers.py or a fixture"


def test_the_private_import_check_finds_one(tmp_path: Path) -> None:
    stray = tmp_path / "test_stray.py"
    stray.write_text("from tests.strategies.test_dense import _record, PUBLIC\n")
    assert _private_test_imports(stray, tmp_path) == [
        "test_stray.py: tests.strategies.test_dense._record"
    ]
