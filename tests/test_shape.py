"""The shape of the code: what a device's ClientApp loads, and which package imports which."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from common.settings import PROJECT_ROOT

PACKAGES = ("common", "wire", "compress", "timing", "strategies", "server", "client", "scripts")
# Server-side code and libraries a ClientApp never needs: Flower starts one ClientApp process
# per message, so each of these would cost every round on a Pi (pymoo, scikit-learn, datasets
# and flwr-datasets with its plotting stack take seconds to import).
NOT_ON_A_DEVICE = (
    "server",
    "timing",
    "scripts",
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


def test_the_client_app_loads_no_server_side_module() -> None:
    code = "import sys, client.app; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
    )
    loaded = out.stdout.split()
    assert "strategies.collectives.allreduce" in loaded  # the client halves are there
    offending = [m for m in loaded if any(m == p or m.startswith(p + ".") for p in NOT_ON_A_DEVICE)]
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
    assert not {"server", "timing", "scripts"} & graph["client"]


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
PRODUCT = ("common", "wire", "compress", "timing", "strategies", "server", "client")
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
        for package in (*PRODUCT, "scripts")
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if path != PROJECT_ROOT / "common" / "settings.py"
    ]
    assert _named_outside_their_modules(paths) == []


def test_the_name_check_finds_a_name(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text('"""Docs may say allgather."""\nCHOICE = "allreduce"\n')
    assert _named_outside_their_modules([stray], root=tmp_path) == ["stray.py:2: 'allreduce'"]
