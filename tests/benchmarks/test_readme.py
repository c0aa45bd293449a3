"""benchmarks/README.md has a line for every measurement tool, and names no tool that is gone."""

import re

from common.settings import PROJECT_ROOT

BENCHMARKS = PROJECT_ROOT / "benchmarks"


def test_every_tool_has_its_line_and_every_line_its_tool() -> None:
    tools = {p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__"}
    listed = set(re.findall(r"^\| `(\w+)` \|", (BENCHMARKS / "README.md").read_text(), re.M))
    assert listed == tools
