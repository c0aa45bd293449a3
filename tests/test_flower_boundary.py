"""Where edgeflex reaches inside Flower, listed: docs/architecture.md's table of the modules
that import a private Flower module or write a private attribute of a Flower object equals
what the code does, and every patch in common/flower_patches.py says which Flower it checks,
what Flower does, what it changes, what is lost where it stands aside and when it can go."""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
from pathlib import Path

from common import flower_patches
from common.flower_patches import PATCHES, SUPPORTED_FLWR
from tests.helpers import PATCHES_MODULE, names_imported_from

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# What Flower's API reference documents; every other flwr module is Flower's internals.
PUBLIC = {
    "flwr",
    "flwr.app",
    "flwr.clientapp",
    "flwr.clientapp.mod",
    "flwr.common",
    "flwr.serverapp",
    "flwr.serverapp.strategy",
    "flwr.simulation",
}


def _flower(module: str) -> bool:
    return module == "flwr" or module.startswith("flwr.")


def reach(source: str) -> tuple[set[str], set[str]]:
    """(private Flower modules ``source`` imports, private Flower attributes it writes): a
    ``__dict__["_name"]`` store, or an attribute of a name imported from Flower set by
    assignment or ``setattr``."""
    tree = ast.parse(source)
    private: set[str] = set()
    from_flower = names_imported_from(tree, _flower)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _flower(node.module):
            if node.module not in PUBLIC:
                private.add(node.module)
        elif isinstance(node, ast.Import):
            private |= {a.name for a in node.names if _flower(a.name) and a.name not in PUBLIC}
    writes: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Attribute)
                and target.value.attr == "__dict__"
                and isinstance(target.slice, ast.Constant)
                and str(target.slice.value).startswith("_")
            ):
                writes.add(str(target.slice.value))
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in from_flower
            ):
                writes.add(f"{target.value.id}.{target.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in from_flower
        ):
            writes.add(f"{node.args[0].id}.*")
    return private, writes


def code_boundary(root: Path = ROOT) -> dict[str, tuple[set[str], set[str]]]:
    """Every tracked module outside tests/ that reaches inside Flower, and how."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    found = {}
    for path in tracked:
        if path.startswith("tests/"):
            continue
        private, writes = reach((root / path).read_text())
        if path == PATCHES_MODULE:
            writes = set()
        if private or writes:
            found[path] = (private, writes)
    return found


def listed_boundary(text: str) -> dict[str, tuple[set[str], set[str]]]:
    """The table under "## The Flower boundary": module -> (imports, writes)."""
    section = text.split("## The Flower boundary", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        names = [set(re.findall(r"`([^`]+)`", cell)) for cell in cells[:3]]
        (module,) = names[0]
        rows[module] = (names[1], names[2])
    return rows


def test_the_listed_boundary_is_every_module_that_reaches_inside_flower() -> None:
    listed = listed_boundary(ARCHITECTURE.read_text())
    found = code_boundary()
    assert sorted(listed) == sorted(found), "modules listed in docs/architecture.md"
    for module, (imports, writes) in found.items():
        assert listed[module] == (imports, writes), module


def test_the_scan_finds_private_imports_and_writes() -> None:
    source = (
        "import flwr.proto.fleet_pb2\n"
        "from flwr.app import Message\n"  # public
        "from flwr.common import log\n"  # public
        "from flwr.supercore.task_identity import TaskIdentity\n"
        "def f(reply, other):\n"
        "    reply.metadata.__dict__['_message_id'] = 1\n"
        "    reply.__dict__['content'] = 2\n"  # not private
        "    setattr(TaskIdentity, '_run_id', 1)\n"
        "    Message.trace = True\n"
        "    other.value = 3\n"  # not Flower's, as far as the module says
    )
    assert reach(source) == (
        {"flwr.proto.fleet_pb2", "flwr.supercore.task_identity"},
        {"_message_id", "TaskIdentity.*", "Message.trace"},
    )


def test_the_table_parser_reads_each_row() -> None:
    text = (
        "## The Flower boundary\n\n| module | imports | writes | why |\n|---|---|---|---|\n"
        "| `a/b.py` | `flwr.proto.x`, `flwr.supercore` | `_id` | a reason |\n"
        "| `c.py` | `flwr.common.serde` | - | another |\n\n## Next\n| `d.py` | `x` | - | y |\n"
    )
    assert listed_boundary(text) == {
        "a/b.py": ({"flwr.proto.x", "flwr.supercore"}, {"_id"}),
        "c.py": ({"flwr.common.serde"}, set()),
    }


def _patches_in_module() -> set[str]:
    """The module's public functions that stand aside on another Flower, each under its own
    name: the patches."""
    found = set()
    for name, function in inspect.getmembers(flower_patches, inspect.isfunction):
        source = inspect.getsource(function)
        if function.__module__ == flower_patches.__name__ and "stands_aside(" in source:
            assert name == "stands_aside" or f'stands_aside("{name}")' in source, name
            found.add(name)
    return found - {"stands_aside"}


def test_every_patch_says_which_flower_what_it_changes_what_is_lost_and_when_it_can_go() -> None:
    assert set(PATCHES) == _patches_in_module()
    for name, patch in PATCHES.items():
        assert patch.flower.startswith(SUPPORTED_FLWR), name
        for field in ("upstream", "change", "without", "removable_when"):
            assert len(getattr(patch, field).split()) >= 5, f"{name}: {field} says too little"
