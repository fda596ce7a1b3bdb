"""The one loader of files vendored byte for byte from other repositories, read with
importlib.resources so that they ship as package data (pyproject: ``"noterag.prompts" =
["official/*/*", "original/*/*"]``). Two folders, one layout (``<owner>-<repository>/`` with a
SOURCE.json: repository, commit, each file's git blob id):

* ``prompts/official/``: the prompt files of the official codes of Adaptive-Note and DeepNote
  (the ``official`` profile), each a ``str.format`` template: ``official_prompt``;
* ``prompts/original/``: files of the baselines' original repositories (their prompts,
  notebooks, examples), read by the modules that transcribe them: ``text``, ``cite``.

A file's citation is ``<repository> <path in the repository> @ <commit>``: the path is
SOURCE.json's ``files`` entry for the file, else its ``path`` folder joined with the name.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, Literal

from noterag.core.prompt import Prompt

Kind = Literal["official", "original"]


def folder(repository: str, kind: Kind = "original") -> Traversable:
    """The folder of ``repository``'s vendored files ("ysymyth/ReAct")."""
    return resources.files("noterag.prompts") / kind / repository.replace("/", "-")


@cache
def source(repository: str, kind: Kind = "original") -> dict[str, Any]:
    """SOURCE.json of ``repository``'s vendored files."""
    loaded: dict[str, Any] = json.loads(
        folder(repository, kind).joinpath("SOURCE.json").read_text("utf-8")
    )
    return loaded


def text(repository: str, file: str, kind: Kind = "original") -> str:
    """A vendored file's text as the original code reads it (``open(f).read()``: UTF-8, Python's
    universal newlines, so a ``\r\n`` file reads as ``\n``; a file without ``\r`` reads as its
    bytes)."""
    return folder(repository, kind).joinpath(file).read_text(encoding="utf-8")


def cite(repository: str, file: str, kind: Kind = "original") -> str:
    """A vendored file's citation: ``<repository> <path in the repository> @ <commit>``."""
    found = source(repository, kind)
    path = (found.get("files") or {}).get(file) or f"{found['path']}/{file}".lstrip("/")
    return f"{repository} {path} @ {str(found['commit'])[:7]}"


def official_prompt(repository: str, file: str, name: str) -> Prompt:
    """The official code's prompt file ``file`` of ``repository`` as a prompt named ``name``,
    rendered with ``str.format`` as the official code does (``open(f).read().format(**vars)``)."""
    return Prompt(
        name,
        text(repository, file, "official"),
        cite(repository, file, "official"),
        style="format",
    )
