"""The install: one Pi pin within pyproject's torch range and repeated nowhere, a device
install without the server's packages, and a device's code path running where those cannot be
imported."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest
from flwr.app import Message
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.proto.message_pb2 import Message as MessageProto  # type: ignore[attr-defined]
from packaging.requirements import Requirement

from commands.install_torch import AARCH64_PIN, TESTED_TORCH
from common.settings import PROJECT_ROOT
from testing.in_process import InProcessGrid
from tests.helpers import federation_settings, run_in_process

PROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
TORCH_REQUIREMENT = re.compile(r"torch\s*(==|>=|<=|~=|!=|<|>)\s*[\d.]+")
# Not installed on a device: an import of them fails anywhere in its processes.
NOT_ON_A_DEVICE = ("ray", "pymoo", "pytest", "mypy", "ruff")
# Installed on a device only because Flower (rich) and Flower Datasets and mnist1d
# (matplotlib) require them: edgeflex's own device code must not import them.
NOT_IMPORTED_BY_EDGEFLEX = ("rich", "matplotlib")


def _requirements(names: Iterable[str]) -> list[Requirement]:
    return [Requirement(r) for r in names]


def test_the_pi_pin_is_written_once_and_within_the_projects_torch_range() -> None:
    lines = [
        line for line in AARCH64_PIN.read_text().splitlines() if line and not line.startswith("#")
    ]
    (pin,) = _requirements(lines)
    (torch,) = [r for r in _requirements(PROJECT["dependencies"]) if r.name == "torch"]
    (version,) = [s.version for s in pin.specifier if s.operator == "=="]
    assert pin.name == "torch" and torch.specifier.contains(version)
    (tested,) = [s.version for s in Requirement(TESTED_TORCH).specifier]
    assert torch.specifier.contains(tested)
    pages = [
        PROJECT_ROOT / "README.md",
        PROJECT_ROOT / "Makefile",
        *(PROJECT_ROOT / "docs").rglob("*.md"),
    ]
    for page in pages:
        for found in TORCH_REQUIREMENT.finditer(page.read_text()):
            assert found.group() == TESTED_TORCH, (
                f"{page.name} repeats a torch pin: {found.group()}"
            )
    for name in ("README.md", "docs/deployment.md"):
        assert "deploy/torch-aarch64.txt" in (PROJECT_ROOT / name).read_text(), name


def test_a_device_installs_none_of_the_servers_packages() -> None:
    base = {r.name: r for r in _requirements(PROJECT["dependencies"])}
    assert not base["flwr"].extras  # no flwr[simulation]: no Ray
    assert not set(base) & {"pymoo", "matplotlib", "rich", "ray", "pytest", "mypy", "ruff"}
    server = {r.name: r for r in _requirements(PROJECT["optional-dependencies"]["server"])}
    assert server["flwr"].extras == {"simulation"}
    assert {"pymoo", "matplotlib", "rich"} <= set(server)
    assert base["flwr"].specifier == server["flwr"].specifier  # one Flower


BLOCKER = """
import sys

ROOT = {root!r}
BLOCKED = frozenset({blocked!r})
OURS_ONLY = frozenset({ours_only!r})


def _ours(filename):
    # the project's own code, not the packages of a venv that lives inside the project
    return filename.startswith(ROOT) and "site-packages" not in filename


def _importer():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
        frame = frame.f_back
    return "" if frame is None else frame.f_code.co_filename


class _NotOnADevice:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in BLOCKED or (top in OURS_ONLY and _ours(_importer())):
            raise ImportError(f"{{name}} is not on a device")
        return None


sys.meta_path.insert(0, _NotOnADevice())
"""

# One message through a device's code path: the agent's and edgeflex-supernode's imports, the
# partition made by the agent's data child, the ClientApp the agent runs.
DEVICE = """
import json, sys
import client.agent, client.supernode
from flwr.supernode.cli.flower_supernode import flower_supernode
from flwr.app import Context, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.proto.message_pb2 import Message as MessageProto
from client.app import make_app
from client.node import LOCAL_DATA_KEY
from client.node_loop import Node
from common.flower_patches import set_task_identity

set_task_identity()  # Message() reads it; a Flower runtime sets it
given = json.loads(sys.argv[1])
proto = MessageProto()
proto.ParseFromString(sys.stdin.buffer.read())
context = Context(
    run_id=1,
    node_id=given["node_id"],
    node_config=given["node_config"],
    state=RecordDict(),
    run_config=given["run_config"],
)
Node.make_local_data(context)
assert LOCAL_DATA_KEY in context.state, "the data child made no partition"
reply = make_app(None, shared_files=False)(message_from_proto(proto), context)
assert not reply.has_error(), reply.error.reason
sys.stdout.buffer.write(message_to_proto(reply).SerializeToString())
"""


class DeviceGrid(InProcessGrid):
    """Each message answered by a fresh process that cannot import the server's packages."""

    def __init__(self, *args: object, blocker_dir: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.env = os.environ | {
            "PYTHONPATH": os.pathsep.join([str(blocker_dir), str(PROJECT_ROOT)])
        }

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        replies = []
        for msg in messages:
            context = self.contexts[msg.metadata.dst_node_id]
            given = {
                "node_id": context.node_id,
                "node_config": dict(context.node_config),
                "run_config": dict(context.run_config),
            }
            done = subprocess.run(
                [sys.executable, "-c", DEVICE, json.dumps(given)],
                input=message_to_proto(msg).SerializeToString(),
                capture_output=True,
                cwd=PROJECT_ROOT,
                env=self.env,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
            proto = MessageProto()
            proto.ParseFromString(done.stdout)
            replies.append(message_from_proto(proto))
        return replies


@pytest.mark.slow
@pytest.mark.usefixtures("task_identity")
def test_a_device_trains_where_the_servers_packages_cannot_be_imported(tmp_path: Path) -> None:
    """A round of the real strategy whose clients each run in a process (and its data child)
    where ray, pymoo and the dev tools cannot be imported at all, and rich and matplotlib
    not by edgeflex's code; the server side runs here, in the full environment."""
    (tmp_path / "sitecustomize.py").write_text(
        BLOCKER.format(
            root=str(PROJECT_ROOT) + os.sep,
            blocked=NOT_ON_A_DEVICE,
            ours_only=NOT_IMPORTED_BY_EDGEFLEX,
        )
    )
    check = subprocess.run(
        [sys.executable, "-c", "import pymoo"],
        env=os.environ | {"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert "pymoo is not on a device" in check.stderr  # the blocker is in place
    settings = federation_settings(num_clients=2)
    grid = DeviceGrid(settings, blocker_dir=tmp_path)
    _, _, _, rounds = run_in_process(settings, 1, grid)
    assert (rounds[1].num_clients, rounds[1].refused, rounds[1].failed) == (2, [], [])
