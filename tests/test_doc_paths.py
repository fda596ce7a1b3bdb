"""No doc names a missing file, and the hand-written per-method docs list the registry.

Every repository path that a page names (README.md, docs/*.md, the other .md files of the
checkout) exists, and every ``noterag.*`` dotted name imports. The per-method tables and
sections of docs/usage.md and docs/deviations.md are written by hand: each must name every
registered method and no other, so a new method's author is told which page still lacks it.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

import noterag

ROOT = Path(__file__).resolve().parents[1]

# The folders of the checkout that a doc may point into. A path starting with one of these,
# after a space, a backtick, a bracket or a parenthesis (not in a URL or another repository's
# path, such as thunlp/DeepNote's prompts/en), is a path of this checkout.
FOLDERS = (
    "noterag",
    "graphs",
    "nodes",
    "prompts",
    "retrievers",
    "tests",
    "bench",
    "docs",
    "examples",
    "tables",
)
PATH = re.compile(r"(?<![\w.:@~/-])(?:\./)?((?:" + "|".join(FOLDERS) + r")/[\w.*/-]*)")
DOTTED = re.compile(r"(?<![\w./-])(noterag(?:\.\w+)+)")

# Paths of 0.1 that docs/upgrading.md names as moved: they must be gone, and only that page may
# name them.
GONE = {"noterag/templates/", "noterag/server_auth.py", "noterag/server_http.py"}


def pages() -> list[Path]:
    tracked = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    # The vendored prompt files are other repositories' text, byte for byte.
    return [
        ROOT / p for p in tracked if not p.startswith(("prompts/official/", "prompts/original/"))
    ]


def named_paths(text: str) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATH.finditer(line):
            path = match.group(1)
            following = line[match.end() : match.end() + 1]
            if following in ("<", "{") or "..." in path:
                continue  # a placeholder (graphs/<method>.py) or an elision, not a path
            found.append((number, path.rstrip(".,;")))
    return found


def bench_output(path: str) -> bool:
    """bench/results/NAME.json is written by a benchmark (``write_results("NAME", ...)``) and kept
    out of git: it exists after `make bench`, and the bench that writes it must exist now."""
    name = re.fullmatch(r"bench/results/(\w+)\.json", path)
    if not name:
        return False
    call = re.compile(r"write_results\(\s*[\"']" + name.group(1) + r"[\"']")
    return any(call.search(p.read_text(encoding="utf-8")) for p in (ROOT / "bench").glob("*.py"))


def exists(path: str) -> bool:
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists() or bench_output(path)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page: Path) -> None:
    name = page.relative_to(ROOT).as_posix()
    text = page.read_text(encoding="utf-8")
    missing = [
        f"{name}:{line}: {path}"
        for line, path in named_paths(text)
        if not exists(path) and not (name == "docs/upgrading.md" and path in GONE)
    ]
    assert missing == [], "paths named that do not exist (moved? fix the page):\n" + "\n".join(
        missing
    )


def test_the_paths_of_0_1_are_gone_and_named_only_as_moved() -> None:
    for path in GONE:
        assert not (ROOT / path).exists(), path
    upgrading = {path for _, path in named_paths((ROOT / "docs" / "upgrading.md").read_text())}
    assert upgrading >= GONE
    for page in pages():
        if page.name != "upgrading.md":
            assert GONE.isdisjoint(
                path for _, path in named_paths(page.read_text(encoding="utf-8"))
            )


def test_the_path_finder_sees_what_it_must() -> None:
    """The scan itself: paths in backticks, links and prose are found; URLs, other repositories'
    paths and placeholders are not."""
    text = (
        "See `graphs/ircot.py`, [x](docs/cli.md) and noterag/core/spec.py. Also `./noterag/server/"
        "http.py:app`, https://github.com/o/r/tests/x.py, thunlp/DeepNote prompts/en (no: after a"
        " slash), `graphs/<method>.py`, `noterag/...`, bench/results/*.json."
    )
    assert [path for _, path in named_paths(text)] == [
        "graphs/ircot.py",
        "docs/cli.md",
        "noterag/core/spec.py",
        "noterag/server/http.py",
        "prompts/en",
        "bench/results/*.json",
    ]
    assert not exists("prompts/en") and exists("bench/results/*.json")
    assert exists("bench/results/throughput.json") and not exists("bench/results/nothing.json")


def removed_names() -> set[str]:
    """The file names that this repository's history deleted or renamed away and that no file of
    the checkout bears now (nodes/stops.py, noterag/server_http.py, ...)."""
    log = subprocess.run(
        ["git", "log", "--diff-filter=DR", "--name-only", "--format="],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {Path(p).name for p in log} - {Path(p).name for p in tracked}


def test_no_page_names_a_removed_file_by_its_bare_name() -> None:
    """A file named without its folder (``stops.py`` in prose) escapes the path check; a name
    that the history removed and nothing bears now is stale wherever it stands."""
    gone = removed_names()
    assert "stops.py" in gone  # nodes/stops.py, removed when the stop rules moved to the graphs
    bare = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, sorted(gone))) + r")(?![\w-])")
    stale = [
        f"{page.relative_to(ROOT)}:{number}: {match.group(1)}"
        for page in pages()
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in bare.finditer(line)
    ]
    assert stale == [], (
        "files named that no longer exist (say where the code lives now):\n" + "\n".join(stale)
    )


def resolves(dotted: str) -> bool:
    """``noterag.a.b.c``: the longest prefix that is a module imports, and the rest are its
    attributes."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if found:
            value = importlib.import_module(module)
            for attribute in parts[end:]:
                if not hasattr(value, attribute):
                    return False
                value = getattr(value, attribute)
            return True
    return False


# The import paths of 0.1, which docs/upgrading.md names on purpose as history: each table row's
# first cell after the key (``| `noterag.spec` | `noterag.core.spec` |``, ``| key | 0.1 | 0.2 |``).
OLD_PATHS = re.compile(r"^\|(?: `[\w.]+` \|)? `(noterag\.[\w.]+)` \| `[^`]+` \|$")


def test_every_dotted_name_the_docs_give_imports() -> None:
    missing = []
    for page in pages():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            old = OLD_PATHS.match(line) if page.name == "upgrading.md" else None
            for match in DOTTED.finditer(line):
                name = match.group(1).rstrip(".")
                if old and name == old.group(1):
                    # gone (noterag.trace is now the package that holds the page)
                    assert name == "noterag.trace" or not resolves(name), (number, name)
                elif not resolves(name):
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {name}")
    assert missing == [], "names that do not import (moved?):\n" + "\n".join(missing)
    assert not resolves("noterag.nodes.stops") and resolves("noterag.core.spec.MethodSpec")


def section(text: str, heading: str) -> str:
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_usage_methods_table_is_the_registry() -> None:
    """docs/usage.md's "The methods in detail": one row per registered method (a row may name
    several), and no other."""
    table = section(
        (ROOT / "docs" / "usage.md").read_text(encoding="utf-8"), "## The methods in detail"
    )
    first_cells = re.findall(r"^\| (`[^|]+`) \|", table, flags=re.MULTILINE)
    listed = [name for cell in first_cells for name in re.findall(r"`([^`]+)`", cell)]
    assert len(listed) == len(set(listed)), "a method listed twice in docs/usage.md"
    assert set(listed) - set(noterag.METHODS) == set(), "docs/usage.md lists methods not registered"
    lacking = sorted(set(noterag.METHODS) - set(listed))
    assert lacking == [], (
        f"docs/usage.md's table 'The methods in detail' lacks {lacking}: add a row for each"
    )


def short_title(title: str) -> str:
    return title.split(" (")[0].casefold()


def test_deviations_has_a_paragraph_per_method() -> None:
    """docs/deviations.md: every registered method is named (by its title, as ``noterag
    methods`` prints it) at the head of one paragraph of "Note methods" or "Baselines"."""
    text = (ROOT / "docs" / "deviations.md").read_text(encoding="utf-8")
    heads = re.findall(
        r"^\*\*([^*]+)\*\*",
        section(text, "## Note methods") + section(text, "## Baselines"),
        re.MULTILINE,
    )
    named = [name.strip().casefold() for head in heads for name in head.split(",")]
    titles = {short_title(spec.title): name for name, spec in noterag.METHODS.items()}
    assert len(named) == len(set(named)), "a method has two paragraphs in docs/deviations.md"
    assert set(named) - set(titles) == set(), (
        "docs/deviations.md has paragraphs for methods not registered"
    )
    lacking = [titles[title] for title in set(titles) - set(named)]
    assert lacking == [], (
        f"docs/deviations.md has no paragraph for {lacking}: add one under 'Baselines' (or 'Note "
        "methods') headed by the method's title in bold"
    )


def test_deviations_original_table_is_the_methods_with_that_profile() -> None:
    text = (ROOT / "docs" / "deviations.md").read_text(encoding="utf-8")
    table = text.split("| method | `original` sets | source |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    original = [name for name, spec in noterag.METHODS.items() if "original" in spec.profiles]
    assert sorted(listed) == sorted(original), (
        "docs/deviations.md's `original` table must have one row per method with the `original` "
        "profile"
    )
