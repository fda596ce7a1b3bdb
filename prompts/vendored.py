"""Files vendored byte for byte from the original repositories of the baselines, under
``prompts/original/<owner>-<repository>/`` with a SOURCE.json (repository, commit, each file's
path in the repository and git blob id), read with importlib.resources so that they ship as
package data (pyproject: ``"noterag.prompts" = [..., "original/*/*"]``).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

ORIGINAL_DIR = "original"


def folder(repository: str) -> Traversable:
    """The folder of ``repository``'s vendored files ("ysymyth/ReAct")."""
    return resources.files("noterag.prompts") / ORIGINAL_DIR / repository.replace("/", "-")


@cache
def original_source(repository: str) -> dict[str, Any]:
    """SOURCE.json of ``repository``'s vendored files."""
    loaded: dict[str, Any] = json.loads(
        folder(repository).joinpath("SOURCE.json").read_text("utf-8")
    )
    return loaded


def original_text(repository: str, file: str) -> str:
    """A vendored file's text, its bytes as they are (no newline translation, as the original
    code reads it on Linux)."""
    return folder(repository).joinpath(file).read_bytes().decode("utf-8")


def cite(repository: str, file: str) -> str:
    """A vendored file's citation: ``<repository> <path in the repository> @ <commit>``."""
    source = original_source(repository)
    return f"{repository} {source['files'][file]} @ {str(source['commit'])[:7]}"
