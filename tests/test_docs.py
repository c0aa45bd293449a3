"""The README is short, its figures are on the results index (docs/results/index.md), and no
page links outside the repository or to a file that is not there."""

import re
from pathlib import Path

from common.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
RESULTS = PROJECT_ROOT / "docs" / "results" / "index.md"
PAGES = [
    README,
    PROJECT_ROOT / "CHANGELOG.md",
    *sorted((PROJECT_ROOT / "docs").rglob("*.md")),
    PROJECT_ROOT / "benchmarks" / "README.md",
]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _prose(text: str) -> str:
    """Text without code blocks and inline code (commands, versions, settings)."""
    return re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))


def figures(text: str) -> set[str]:
    """Measured numbers: decimals in prose, leaving out versions (Python 3.11, a.b.c)."""
    found = set()
    for match in re.finditer(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)", _prose(text)):
        if not text[: match.start()].endswith("Python "):
            found.add(match.group())
    return found


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 260


def test_every_figure_in_the_readme_is_on_the_results_index() -> None:
    results = RESULTS.read_text()
    assert sorted(f for f in figures(README.read_text()) if f not in results) == []


def test_the_figure_check_sees_a_figure_and_not_a_version() -> None:
    assert figures("accuracy 0.9657 on Python 3.11 with `torch==2.13.0`, flwr 1.42.1") == {"0.9657"}


def _links(page: Path) -> list[str]:
    return [
        t for t in LINK.findall(page.read_text()) if "://" not in t and not t.startswith("mailto:")
    ]


def test_links_stay_in_the_repository_and_find_their_file() -> None:
    broken = []
    for page in PAGES:
        for target in _links(page):
            path = (page.parent / target).resolve()
            if not path.is_relative_to(PROJECT_ROOT) or not path.exists():
                broken.append(f"{page.relative_to(PROJECT_ROOT)}: {target}")
    assert broken == []
