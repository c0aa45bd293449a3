"""The docs as a reference: the README is short and its figures are the results index's, the
index's figures are on the pages it links for them, every page under docs/ is under 400 lines
and says nothing of history (that is CHANGELOG.md's), docs/architecture.md names only modules
that exist, and no page links outside the repository or to a file or heading that is not
there."""

import os
import re
from pathlib import Path

from common.settings import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
CHANGELOG = PROJECT_ROOT / "CHANGELOG.md"
DOCS = PROJECT_ROOT / "docs"
RESULTS = DOCS / "results"
INDEX = RESULTS / "index.md"
ARCHITECTURE = DOCS / "architecture.md"
DOC_PAGES = sorted(DOCS.rglob("*.md"))
PAGES = [README, CHANGELOG, *DOC_PAGES, PROJECT_ROOT / "benchmarks" / "README.md"]
MAX_PAGE_LINES = 400
LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")
CODE_BLOCK = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)


def _prose(text: str) -> str:
    """Text without code blocks and inline code (commands, versions, settings)."""
    return re.sub(r"`[^`]*`", "", CODE_BLOCK.sub("", text))


def figures(text: str) -> set[str]:
    """Measured numbers: decimals in prose, leaving out versions (Python 3.11, a.b.c)."""
    found = set()
    prose = _prose(text)
    for match in re.finditer(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)", prose):
        if not prose[: match.start()].endswith("Python "):
            found.add(match.group())
    return found


def test_the_figure_check_sees_a_figure_and_not_a_version() -> None:
    assert figures("accuracy 0.9657 on Python 3.11 with `torch==2.13.0`, flwr 1.42.1") == {"0.9657"}
    assert figures("```\nrun 2.5\n```\n`x` Python 3.11, `y` 0.93-1.19x") == {"0.93", "1.19"}


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 260


# --- the results index and its pages ---------------------------------------------------------


def sections(text: str) -> list[tuple[str, str]]:
    """A page cut at its `## ` headings (outside code blocks): (heading, the section's text)."""
    cuts = [0]
    blocks = [m.span() for m in CODE_BLOCK.finditer(text)]
    for match in re.finditer(r"^## .*$", text, re.M):
        if not any(a <= match.start() < b for a, b in blocks):
            cuts.append(match.start())
    cuts.append(len(text))
    parts = [text[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    return [(part.splitlines()[0] if part else "", part) for part in parts]


def unchecked_index_figures(index: Path) -> list[str]:
    """The index's figures that are not on the results page their section links: a section
    that holds a figure links exactly one page of its folder, and that page holds the figure."""
    problems = []
    for heading, text in sections(index.read_text()):
        found = figures(text)
        if not found:
            continue
        pages = {
            (index.parent / target).resolve()
            for target, _ in LINK.findall(text)
            if target.endswith(".md") and "/" not in target and target != index.name
        }
        if len(pages) != 1:
            problems.append(f"{heading!r}: figures and {len(pages)} results pages linked")
            continue
        page = pages.pop()
        if not page.exists():
            problems.append(f"{heading!r}: {page.name} is not there")
            continue
        problems += [
            f"{heading!r}: {f} not on {page.name}" for f in found - figures(page.read_text())
        ]
    return sorted(problems)


def test_every_figure_in_the_readme_is_on_the_results_index() -> None:
    assert sorted(figures(README.read_text()) - figures(INDEX.read_text())) == []


def test_every_figure_on_the_index_is_on_the_page_it_links() -> None:
    assert unchecked_index_figures(INDEX) == []


def test_the_index_check_finds_a_figure_its_page_does_not_hold(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\nfinal 0.9657, best 0.9722\n")
    index = tmp_path / "index.md"
    index.write_text("# Index\n\n## A\n\n[a](a.md): 0.9657 and 0.9723\n\n## Pages\n\n[a](a.md)\n")
    assert unchecked_index_figures(index) == ["'## A': 0.9723 not on a.md"]
    index.write_text("# Index\n\n## Two\n\n[a](a.md), [b](b.md): 0.9657\n")
    assert unchecked_index_figures(index) == ["'## Two': figures and 2 results pages linked"]


# --- every page under docs/ ------------------------------------------------------------------


def test_every_page_under_docs_is_under_400_lines() -> None:
    long = [
        f"{page.relative_to(PROJECT_ROOT)}: {n}"
        for page in DOC_PAGES
        if (n := len(page.read_text().splitlines())) >= MAX_PAGE_LINES
    ]
    assert long == []


HISTORY = re.compile(r"\b(?:before|since|until|after) issue \d+|\b20\d\d-\d\d-\d\d\b", re.I)


def history(text: str) -> list[str]:
    """What a reference page must not say: "before issue N" and its kind, or a date (a dated
    default, a measurement's day); code blocks and inline code may hold dates."""
    return sorted(set(HISTORY.findall(_prose(text))))


def test_no_page_under_docs_dates_anything_or_says_before_issue() -> None:
    dated = {
        str(page.relative_to(PROJECT_ROOT)): found
        for page in DOC_PAGES
        if (found := history(page.read_text()))
    }
    assert dated == {}


def test_the_history_check_sees_dates_and_issues_in_prose_only() -> None:
    text = (
        "The default until 2026-12-05, before issue 17 and Since Issue 40.\n\n"
        "```bash\nls results/2026-12-05\n```\n`2026-12-06` and issue 35's bar"
    )
    assert history(text) == ["2026-12-05", "Since Issue 40", "before issue 17"]


# --- docs/architecture.md names modules that exist --------------------------------------------


PACKAGES = sorted(p.parent.name for p in PROJECT_ROOT.glob("*/__init__.py"))
FOREIGN = ("GRACE", "Flower")  # a table cell that starts with another project names its files


def _exists(path: str, within: str | None) -> bool:
    """A path of ours: at the root, under a package, or (a bare file name) anywhere under the
    package `within` names, else under any package."""
    if "/" in path:
        return any(
            (root / path).exists() for root in [PROJECT_ROOT] + [PROJECT_ROOT / p for p in PACKAGES]
        )
    roots = [PROJECT_ROOT / within] if within else [PROJECT_ROOT / p for p in PACKAGES]
    return any(next(root.rglob(path), None) for root in roots)


def missing_modules(text: str) -> list[str]:
    """Backticked module paths (`strategies/edge.py`, `compress/`, `keys.py`) and dotted modules
    of ours (`wire.train_instruction.TrainInstruction`) that the repository does not hold. In a
    table row that starts with a package (`wire/`), bare file names are that package's."""
    missing = []
    for line in _prose_lines(text):
        row = line.lstrip().startswith("|")
        cells = line.strip().strip("|").split("|") if row else [line]
        first = re.fullmatch(r"\s*`(\w+)/`\s*", cells[0])
        within = first.group(1) if first else None
        for cell in cells:
            if row and cell.strip().startswith(FOREIGN):
                continue
            for token in re.findall(r"`([^`\s]+)`", cell):
                if re.fullmatch(r"[\w.-]+(?:/[\w.-]*)+|[\w-]+\.py", token):
                    if not _exists(token, within):
                        missing.append(token)
                elif re.fullmatch(r"[a-z_]+(?:\.\w+)+", token) and token.split(".")[0] in PACKAGES:
                    package, module = token.split(".")[:2]
                    base = PROJECT_ROOT / package
                    if not ((base / f"{module}.py").exists() or (base / module).is_dir()):
                        missing.append(token)
    return missing


def _prose_lines(text: str) -> list[str]:
    return CODE_BLOCK.sub("", text).splitlines()


def test_every_module_the_architecture_names_exists() -> None:
    assert missing_modules(ARCHITECTURE.read_text()) == []


def test_the_module_check_finds_a_stray_path() -> None:
    text = (
        "| package | owns |\n|---|---|\n"
        "| `wire/` | every key (`keys.py`), the codec (`codec.py`), the guard (`guard.py`) |\n"
        "`strategies/edge.py`, `compress/`, `wire.train_instruction.TrainInstruction`,\n"
        "`strategies/gone.py`, `nowhere/`, `wire.gone.Thing`, `vanished.py`\n"
        "| selector | GRACE `randomk.py`: 40 lines, two `elif` lines in `helper.py` |\n"
        "  ```bash\n  ls `inside/a/block.py`\n  ```\n"
    )
    assert missing_modules(text) == [
        "guard.py",  # strategies/guard.py, not wire's
        "strategies/gone.py",
        "nowhere/",
        "wire.gone.Thing",
        "vanished.py",
    ]


# --- links ------------------------------------------------------------------------------------


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes for a page: lowercase, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(page.read_text()):
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(page: Path, root: Path = PROJECT_ROOT) -> list[str]:
    """Links of a page that leave the repository (root), find no file, or name a heading the
    page they reach does not have."""
    broken = []
    for target, anchor in LINK.findall(page.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        path = (page.parent / target).resolve() if target else page
        if not path.is_relative_to(root) or not path.exists():
            broken.append(f"{page.name}: {target}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{page.name}: {target}#{anchor}")
    return broken


def test_links_stay_in_the_repository_and_find_their_file_and_heading() -> None:
    assert [link for page in PAGES for link in broken_links(page)] == []


def test_the_link_check_finds_a_missing_file_heading_or_a_way_out(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# B\n\n## `make run`: the flagship at seed 42\n\n## B\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[b](b.md#make-run-the-flagship-at-seed-42) [b](b.md#b-1) [b](b.md#gone) [c](c.md)\n"
        "[self](#a) [self](#b) [out](../x.md) [web](https://flower.ai)\n\n# A\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "a.md: b.md#gone",
        "a.md: c.md",
        "a.md: #b",
        "a.md: ../x.md",
    ]
    assert anchors(tmp_path / "b.md") == {"b", "make-run-the-flagship-at-seed-42", "b-1"}


SKIPPED = {
    ".venv",
    ".venv-flwr-nightly",  # make test-flwr-nightly
    ".git",
    ".flwr",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "results",
}


def cited_pages(root: Path) -> set[str]:
    """The doc pages (`docs/....md`) that code, configs and tests cite, by path from the root."""
    cited = set()
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in SKIPPED]
        for name in files:
            if name.endswith((".py", ".toml")):
                text = (Path(folder) / name).read_text()
                cited |= set(re.findall(r"\bdocs/[\w/-]+\.md\b", text))
    return cited


def test_every_doc_page_that_code_or_configs_cite_is_there() -> None:
    assert sorted(p for p in cited_pages(PROJECT_ROOT) if not (PROJECT_ROOT / p).exists()) == []


def test_the_citation_check_reads_code_and_configs(tmp_path: Path) -> None:
    gone, ignored = "docs" + "/gone.md", "docs" + "/ignored.md"  # not cited by this file
    (tmp_path / "a.py").write_text(f'"""Measured: docs/results/flagship.md, {gone}."""')
    (tmp_path / "b.toml").write_text("# (docs/results/scale.md)\n")
    (tmp_path / "c.md").write_text(f"{ignored}\n")
    assert cited_pages(tmp_path) == {"docs/results/flagship.md", gone, "docs/results/scale.md"}
