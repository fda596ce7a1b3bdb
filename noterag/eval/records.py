"""The JSON objects of a dataset file, each with the place it came from.

A file whose first non-blank character is ``[`` is one JSON array (its records are *items*);
anything else is JSONL (its records are *lines*, blank ones skipped). A UTF-8 byte order mark is
ignored. Every error is a ``DatasetError`` naming the file and the 1-based line or item.
"""

from __future__ import annotations

import codecs
import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from noterag.errors import NoteragError


class DatasetError(NoteragError):
    """A dataset file is missing or has a malformed record (the message names the line)."""


@dataclass(frozen=True)
class Record:
    """One JSON object of a dataset file."""

    file: str  # the file's name, for messages
    unit: str  # "line" (JSONL) or "item" (JSON array)
    number: int  # 1-based line or item number
    index: int  # 1-based position among records (blank lines skipped), for generated ids
    obj: dict[str, Any]

    @property
    def position(self) -> str:
        return f"{self.unit} {self.number}"

    @property
    def where(self) -> str:
        return f"{self.file} {self.position}"


def json_type(value: Any) -> str:
    """The JSON name of a value's type, for messages ("got array")."""
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def iter_records(path: Path) -> Iterator[Record]:
    """Yield the JSON objects of a JSONL file or of a file holding one JSON array."""
    with _open(path) as handle:
        # Look at the first non-blank line: "[" starts a JSON array, anything else is JSONL.
        head: list[bytes] = []
        for raw in handle:
            if not head and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            head.append(raw)
            if raw.strip():
                break
        if head and head[-1].lstrip().startswith(b"["):
            yield from _array_records(path.name, b"".join(head) + handle.read())
        else:
            yield from _jsonl_records(path.name, itertools.chain(head, handle))


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None


def _jsonl_records(name: str, lines: Iterable[bytes]) -> Iterator[Record]:
    index = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        index += 1
        yield Record(name, "line", line_no, index, _line_object(raw, f"{name} line {line_no}"))


def _line_object(raw: bytes, where: str) -> dict[str, Any]:
    try:
        # Without its newline, a cut-off line reads "Unterminated string", not "control
        # character".
        obj = json.loads(raw.decode("utf-8").rstrip("\r\n"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON ({_json_message(exc)})") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {json_type(obj)}")
    return obj


def _array_records(name: str, data: bytes) -> Iterator[Record]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data[: exc.start].count(b"\n") + 1
        raise DatasetError(f"{name} line {line_no}: not valid UTF-8 (byte {exc.start})") from None
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{name} line {exc.lineno}: not valid JSON ({_json_message(exc)})"
        ) from None
    if not isinstance(items, list):  # "[1] [2]" and the like fail above; kept for safety
        raise DatasetError(f"{name}: expected a JSON array of objects")
    for number, obj in enumerate(items, start=1):
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{name} item {number}: expected a JSON object, got {json_type(obj)}"
            )
        yield Record(name, "item", number, number, obj)


def _json_message(exc: json.JSONDecodeError) -> str:
    # Some messages end in "at" ("Unterminated string starting at"); don't say "at at".
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
