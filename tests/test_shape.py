"""The shape of the code: what a device's ClientApp loads, and which package imports which."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import FunctionType

import pytest

from common.settings import PROJECT_ROOT, TABLES
from tests.helpers import PATCHES_MODULE, names_imported_from

PRODUCT = (
    "common",
    "wire",
    "compress",
    "state",
    "timing",
    "collectives",
    "strategies",
    "server",
    "client",
    "commands",
)
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
    assert "collectives.allreduce" in loaded  # the client halves are there
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
    # The layers, bottom up: the wire owns nothing of ours; a device needs no server package,
    # and the server none of the client's.
    assert graph["wire"] == set()
    assert graph["common"] == graph["state"] == {"wire"}
    assert graph["compress"] == {"state", "wire"}
    assert not {"server", "timing", "commands"} & graph["client"]
    assert "client" not in graph["server"]


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


# Every plug-in's name (a collective, selector, encoding or policy: the keys of the tables the
# settings read) is written in its own module: the one that defines it or holds its table.
# Everywhere else reads it from the table or the class. Checked in every package, the settings
# included; common/settings/renamed.py holds the names of older configs, kept to say what
# replaced them. A name that is also a word ("dense", "rate", "star") counts when the whole
# literal is the name: compared with, or a key; a name that is no word ("allgather", "topk")
# counts anywhere in a literal. Docstrings may name anything.
OLD_NAMES = "common/settings/renamed.py"
DTYPES = {"float32", "int8"}  # encodings named after their dtype: the dtype strings are not them
# The same word for something else, not the plug-in
ELSEWHERE = {
    ("common/rates.py", "uniform"): "a stream-rate distribution, not the aggregation weights",
    ("testing/attacks.py", "examples"): "an attack on num-examples, not the aggregation weights",
    ("common/settings/load.py", "leader"): "the key leader, not the index policy",
    ("collectives/allreduce/names.py", "residual-hints"): "that policy's reply key",
    ("timing/devices.py", "cpu"): "the hardware a preset's figures assume, not the device key",
    ("commands/install_torch.py", "cpu"): "PyTorch's CPU wheel index, not the device key",
    ("commands/install_torch.py", "cuda"): "torch.version.cuda, printed, not the device key",
}
REFERENCE = re.compile(r"^[\w.]+:[A-Za-z_]\w*$")  # "module:TABLE": where a table is, not a name


def _owner(value: object, table_module: str) -> str:
    if isinstance(value, (type, FunctionType)):
        return value.__module__
    if isinstance(value, (int, float, str)):  # a flag or a name: the table's own module
        return table_module
    return type(value).__module__ if type(value).__module__ != "builtins" else table_module


def plugin_names() -> dict[str, set[str]]:
    """Every table name -> the modules allowed to spell it (as paths)."""
    owners: dict[str, set[str]] = {}
    tables = {**TABLES, "collectives": "collectives:COLLECTIVES"}
    for reference in tables.values():
        module, attribute = reference.split(":")
        table = getattr(importlib.import_module(module), attribute)
        entries = table.items() if isinstance(table, dict) else ((n, n) for n in table)
        for name, value in entries:
            for where in (module, _owner(value, module)):
                spec = importlib.util.find_spec(where)
                assert spec is not None and spec.origin is not None
                path = Path(spec.origin).relative_to(PROJECT_ROOT)
                # a plug-in written as a package owns its name in every module of it
                package = next((d for d in path.parents if d.name == name), None)
                owners.setdefault(name, set()).add((package or path).as_posix())
    return owners


def _is_word(name: str) -> bool:
    return name.isalpha() and name in WORDS


WORDS = {
    "dense", "auto", "star", "var", "leader", "global", "fixed", "progress", "asf", "knee",
    "persistence", "truncation", "rate", "examples", "uniform", "none", "linear", "iid",
    "dirichlet", "labels", "clip", "median", "sgd", "averaged", "recomputed", "ring", "tree",
    "memory", "disk", "sign", "resnet",
}  # fmt: skip


def _named_outside_their_modules(
    paths: list[Path], owners: dict[str, set[str]], root: Path = PROJECT_ROOT
) -> list[str]:
    """Literals (not docstrings) that name a plug-in outside the modules that own it."""
    words = {n for n in owners if n not in DTYPES and not _is_word(n)}
    anywhere = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, words)) + r")(?![\w-])")
    found = []
    for path in paths:
        where = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        docs |= {  # a setting's description is docs too
            id(c)
            for node in ast.walk(tree)
            if isinstance(node, ast.keyword) and node.arg == "description"
            for c in ast.walk(node.value)
        }
        whole: set[int] = set()  # literals compared with, or used as keys
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                for o in operands:
                    whole |= {id(e) for e in getattr(o, "elts", [o])}
            elif isinstance(node, ast.Subscript):
                whole.add(id(node.slice))
            elif isinstance(node, ast.Dict):
                whole |= {id(k) for k in node.keys if k is not None}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docs or REFERENCE.match(node.value):
                continue
            names = {m.group(1) for m in anywhere.finditer(node.value)}
            if id(node) in whole and node.value in owners and node.value not in DTYPES:
                names.add(node.value)
            owned = {name for name in names if (where, name) in ELSEWHERE} | {
                name
                for name in names
                if any(where == o or where.startswith(o + "/") for o in owners[name])
            }
            if names - owned:
                found.append(f"{where}:{node.lineno}: {node.value[:60]!r}")
    return found


def test_plugin_names_are_spelled_only_in_their_own_modules() -> None:
    """Measurement tools (benchmarks/) name the configurations they measure, as configs do."""
    paths = [
        path
        for package in (*PRODUCT, "testing")
        for path in sorted((PROJECT_ROOT / package).rglob("*.py"))
        if path.relative_to(PROJECT_ROOT).as_posix() != OLD_NAMES
    ]
    assert _named_outside_their_modules(paths, plugin_names()) == []


def test_the_name_check_finds_a_name(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text(
        '"""Docs may say allgather."""\n'
        'CHOICE = "allreduce"\n'
        'if mode == "dense":\n'
        "    pass\n"
        'text = "a dense update"\n'
        'key = "topk-norm2"\n'
    )
    owners = {"allreduce": {"x.py"}, "dense": {"x.py"}, "topk": {"x.py"}}
    found = _named_outside_their_modules([stray], owners, root=tmp_path)
    assert found == ["stray.py:2: 'allreduce'", "stray.py:3: 'dense'"]


def test_every_table_name_has_an_owner() -> None:
    owners = plugin_names()
    assert owners["allgather"] == {
        "collectives/__init__.py",  # the table
        "collectives/allgather.py",  # the class
        "strategies/policies/collective.py",  # collective = allgather's choices
    }
    assert "compress/randomk.py" in owners["randomk"]
    assert "strategies/policies/ratio.py" in owners["nsga2"]


# Flower's internals are changed in PATCHES_MODULE only: an assignment to an attribute of
# anything imported from flwr, or a setattr on it, anywhere else is a patch.


def _flower_patches(path: Path, root: Path = PROJECT_ROOT) -> list[str]:
    tree = ast.parse(path.read_text())
    flower_names = names_imported_from(tree, lambda module: module.startswith("flwr"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            flower_names |= {
                (a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("flwr")
            }

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
