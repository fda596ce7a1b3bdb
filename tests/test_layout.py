"""The folders show the layers: noterag/ is one package per layer, the import-linter layers
contract names exactly those packages, docs/development.md draws them in the contract's order,
and the import paths of 0.1 still import (with a warning) as docs/upgrading.md lists them."""

from __future__ import annotations

import importlib
import json
import re
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from noterag._moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def layers_contract() -> list[str]:
    """The layers of the contract over the whole package (the one without ``containers``)."""
    contracts = [
        c
        for c in PYPROJECT["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and "containers" not in c
    ]
    assert len(contracts) == 1, "expected one layers contract over noterag"
    return list(contracts[0]["layers"])


def package_folder(name: str) -> Path:
    """Where ``noterag.<name>`` lives in the checkout (pyproject.toml's package-dir)."""
    package_dir = PYPROJECT["tool"]["setuptools"]["package-dir"]
    return ROOT / package_dir.get(f"noterag.{name}", f"noterag/{name}")


def holds_code(folder: Path) -> bool:
    """A package with modules besides its ``__init__`` (noterag.data and noterag.tables hold
    data files only, and are no layer)."""
    return any(p.name != "__init__.py" for p in folder.glob("*.py"))


def test_noterag_has_at_most_three_top_level_modules() -> None:
    modules = sorted(p.name for p in (ROOT / "noterag").glob("*.py"))
    assert len(modules) <= 3, f"noterag/ holds {modules}: a module belongs in its layer's package"


def test_every_subpackage_is_a_layer_of_the_contract() -> None:
    layers = layers_contract()
    subpackages = {
        p.name
        for p in (ROOT / "noterag").iterdir()
        if (p / "__init__.py").is_file() and holds_code(p)
    }
    installed = {
        name.removeprefix("noterag.")
        for name in PYPROJECT["tool"]["setuptools"]["packages"]
        if name.count(".") == 1 and holds_code(package_folder(name.removeprefix("noterag.")))
    }
    named = {layer.removeprefix("noterag.") for layer in layers}
    assert subpackages | {"graphs", "nodes", "prompts", "retrievers"} == named
    assert installed == named, "pyproject's packages and the layers contract disagree"
    assert len(layers) == len(set(layers)) and all(layer.count(".") == 1 for layer in layers)


def test_development_picture_is_the_contract() -> None:
    """The picture of the layers names the contract's packages, one line each, top down."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## The layers\n", 1)[1].split("\n## ", 1)[0]
    picture = section.split("```\n", 2)[1]
    drawn = re.findall(r"^(noterag\.\w+)\s+(\S+)", picture, flags=re.MULTILINE)
    assert [package for package, _ in drawn] == layers_contract()
    for package, folder in drawn:
        assert ROOT / folder.rstrip("/") == package_folder(package.removeprefix("noterag.")), (
            f"docs/development.md puts {package} in {folder}"
        )


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_imports_the_moved_module_with_a_warning(
    old: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    new = importlib.import_module(f"noterag.{MOVED[old]}")
    if old == "trace":
        # noterag.trace is now the package that holds the page: its old names are read
        # through it, each with the warning, as the same objects.
        package = importlib.import_module("noterag.trace")
        for name in ("write_html", "load_run", "record", "layout_for"):
            with pytest.warns(DeprecationWarning, match=f"noterag.trace.page.{name}"):
                assert getattr(package, name) is getattr(new, name)
        with pytest.raises(AttributeError):
            package.not_a_name  # noqa: B018
        return
    # As a fresh interpreter would find it: not yet in sys.modules (restored afterwards).
    monkeypatch.delitem(sys.modules, f"noterag.{old}", raising=False)
    with pytest.warns(
        DeprecationWarning, match=rf"noterag\.{old} has moved to noterag\.{MOVED[old]};"
    ):
        module = importlib.import_module(f"noterag.{old}")
    assert module is new
    # Once imported, a second import finds it in sys.modules: the same object, no new warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(f"noterag.{old}") is new


def test_the_warning_points_at_the_importing_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python shows a DeprecationWarning by default only where __main__ triggers it: the warning
    must name the line that imports the old path, not importlib's frames (it said "sys:1", so a
    script's ``import noterag.spec`` printed nothing)."""
    monkeypatch.delitem(sys.modules, "noterag.spec", raising=False)
    with pytest.warns(DeprecationWarning, match="noterag.spec has moved") as caught:
        import noterag.spec  # noqa: F401
    assert [(Path(w.filename), w.lineno) for w in caught] == [
        (Path(__file__), sys._getframe().f_lineno - 2)
    ]


def test_a_path_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("noterag.not_a_module")


def test_upgrading_lists_exactly_the_moved_paths() -> None:
    text = (ROOT / "docs" / "upgrading.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| `noterag\.([\w.]+)` \| `noterag\.([\w.]+)` \|$", text, flags=re.MULTILINE
    )
    assert dict(rows) == MOVED and len(rows) == len(MOVED)


def test_upgrading_names_the_server_paths_of_langgraph_json() -> None:
    """docs/upgrading.md's new langgraph.json paths are the ones langgraph.json uses."""

    config = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "upgrading.md").read_text(encoding="utf-8")
    for key, value in [
        ("checkpointer.path", config["checkpointer"]["path"]),
        ("auth.path", config["auth"]["path"]),
        ("http.app", config["http"]["app"]),
    ]:
        assert re.search(
            rf"^\| `{re.escape(key)}` \| `[^`]+` \| `{re.escape(value)}` \|$", text, re.MULTILINE
        ), key
