"""The shape of the code: what a device's ClientApp loads, and which package imports which."""

from __future__ import annotations

import ast
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
    "strategies.edge",
    "strategies.ledger",
    "strategies.policies",
    "strategies.relay",
    "strategies.replicas",
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
