"""The folders show the layers: noterag/ is one package per layer, the import-linter layers
contract names exactly those packages, docs/development.md draws them in the contract's order,
and the import paths of 0.1 are gone, where docs/upgrading.md lists them as history."""

from __future__ import annotations

import importlib
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

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


def moved_paths() -> dict[str, str]:
    """docs/upgrading.md's table of the 0.1 paths: old -> new (both under noterag.)."""
    text = (ROOT / "docs" / "upgrading.md").read_text(encoding="utf-8")
    rows = re.findall(
        r"^\| `noterag\.([\w.]+)` \| `noterag\.([\w.]+)` \|$", text, flags=re.MULTILINE
    )
    return dict(rows)


def test_the_paths_of_0_1_are_history_each_new_path_imports_and_no_old_one() -> None:
    """0.1 was never published: its paths are not kept (no finder, no shim). docs/upgrading.md
    lists where each went; each new path imports, and each old one does not (``noterag.trace``
    is now the package that holds the page, and has none of the page's names)."""
    moved = moved_paths()
    assert len(moved) == 25
    for old, new in moved.items():
        importlib.import_module(f"noterag.{new}")
        if old == "trace":
            package = importlib.import_module("noterag.trace")
            assert not hasattr(package, "write_html") and not hasattr(package, "load_run")
            continue
        sys.modules.pop(f"noterag.{old}", None)
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"noterag.{old}")


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
