"""The JSON objects of a dataset file, each with the place it came from.

A file whose first non-blank character is ``[`` is one JSON array (its records are *items*);
anything else is JSONL (its records are *lines*, blank ones skipped). A UTF-8 byte order mark is
ignored; a gzip file is decompressed as it is read. Every error is a ``DatasetError`` naming the
file and the 1-based line or item; a string holding a lone surrogate (``"\\ud800"``: valid
JSON, but no text, which no results file or request could carry) is one, naming the field.
"""

from __future__ import annotations

import codecs
import gzip
import itertools
import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from noterag.base.errors import NoteragError
from noterag.base.files import UnreadableJSON, read_json

# The tasks a dataset row may name, each scored by its metrics (noterag.eval.metrics; crud by
# RAGQuestEval with a judge model, noterag.eval.questeval, when a table is reproduced).
TASKS = ("multihop", "asqa", "strategyqa", "crud")


class DatasetError(NoteragError):
    """A dataset file is missing or has a malformed record (the message names the line)."""


@dataclass(frozen=True)
class Record:
    """One JSON object of a dataset file."""

    file: str  # the file's name, for messages
    unit: str  # "line" (JSONL) or "item" (JSON array)
    number: int  # 1-based line or item number
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


# What one read of a dataset may hold in memory, decompressed: a JSONL line (one record; the
# largest in the supported datasets, an ASQA record with its documents, is under 1 MiB) and a
# whole JSON array file (HotpotQA's training set, the largest, is 566 MB). Past them the file
# is refused, naming the line, before it is read on: a gzip bomb, a 2 GiB line or /dev/zero
# costs at most this much memory, not all of it.
MAX_LINE_BYTES = 64 << 20
MAX_ARRAY_BYTES = 1 << 30
# And the records of one file: every question is kept in memory for the run, so a bomb of
# small lines is bounded too (HotpotQA's training set, the largest, has 90,447).
MAX_RECORDS = 1_000_000
_MIB = 1 << 20
# JSON nested past Python's recursion limit (the parser's RecursionError): no dataset nests
# more than a few levels.
TOO_DEEP = "JSON nested too deeply (not a dataset record)"


def iter_records(path: Path) -> Iterator[Record]:
    """Yield the JSON objects of a JSONL file or of a file holding one JSON array."""
    with _open(path) as handle:
        try:
            # Look at the first non-blank line: "[" starts a JSON array, anything else is JSONL.
            head: list[bytes] = []
            lines = _bounded_lines(handle, path.name)
            for raw in lines:
                if not head and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]
                head.append(raw)
                if raw.strip():
                    break
            if head and head[-1].lstrip().startswith(b"["):
                data = b"".join(head)
                data += handle.read(max(0, MAX_ARRAY_BYTES + 1 - len(data)))
                if len(data) > MAX_ARRAY_BYTES:
                    raise DatasetError(
                        f"{path.name}: a JSON array file over the {MAX_ARRAY_BYTES // _MIB:,} MiB "
                        "limit (decompressed); write it as JSONL, one record a line"
                    )
                yield from _array_records(path.name, data)
            else:
                yield from _jsonl_records(path.name, itertools.chain(head, lines))
        except (OSError, EOFError, zlib.error) as exc:  # a cut gzip stream, a disk error
            raise DatasetError(
                f"cannot read {path.name}: {getattr(exc, 'strerror', None) or exc}"
            ) from None


def _bounded_lines(handle: BinaryIO, name: str) -> Iterator[bytes]:
    """The file's lines, each read with a bound: a line longer than ``MAX_LINE_BYTES`` is a
    ``DatasetError`` naming it, raised before more of it is read."""
    for line_no in itertools.count(1):
        raw = handle.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise DatasetError(
                f"{name} line {line_no}: longer than the {MAX_LINE_BYTES // _MIB} MiB limit for "
                "one record (not a dataset file?)"
            )
        yield raw


def _open(path: Path) -> BinaryIO:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None
    if handle.peek(2)[:2] == b"\x1f\x8b":  # gzip, by its bytes
        handle.close()
        return cast(BinaryIO, gzip.open(path, "rb"))
    return handle


def _jsonl_records(name: str, lines: Iterable[bytes]) -> Iterator[Record]:
    count = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        count += 1
        if count > MAX_RECORDS:
            raise DatasetError(_too_many(f"{name} line {line_no}"))
        yield Record(name, "line", line_no, _line_object(raw, f"{name} line {line_no}"))


def _too_many(where: str) -> str:
    return f"{where}: more than {MAX_RECORDS:,} records, the limit for one dataset file"


def _line_object(raw: bytes, where: str) -> dict[str, Any]:
    try:
        # Without its newline, a cut-off line reads "Unterminated string", not "control
        # character".
        obj = read_json(raw.decode("utf-8").rstrip("\r\n"))
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{where}: not valid JSON ({_json_message(exc)})") from None
    except UnreadableJSON as exc:
        raise DatasetError(f"{where}: {exc} (not a dataset record)") from None
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {json_type(obj)}")
    if b"\\u" in raw:  # only a JSON \u escape makes a lone surrogate, decoded UTF-8 never
        check_text(obj, where)
    return obj


def _array_records(name: str, data: bytes) -> Iterator[Record]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data[: exc.start].count(b"\n") + 1
        raise DatasetError(f"{name} line {line_no}: not valid UTF-8 (byte {exc.start})") from None
    try:
        items = read_json(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{name} line {exc.lineno}: not valid JSON ({_json_message(exc)})"
        ) from None
    except UnreadableJSON as exc:
        raise DatasetError(f"{name}: {exc} (not a dataset)") from None
    if not isinstance(items, list):  # "[1] [2]" and the like fail above; kept for safety
        raise DatasetError(f"{name}: expected a JSON array of objects")
    escaped = b"\\u" in data
    if len(items) > MAX_RECORDS:
        raise DatasetError(_too_many(f"{name} item {MAX_RECORDS + 1:,}"))
    for number, obj in enumerate(items, start=1):
        if not isinstance(obj, dict):
            raise DatasetError(
                f"{name} item {number}: expected a JSON object, got {json_type(obj)}"
            )
        if escaped:
            check_text(obj, f"{name} item {number}")
        yield Record(name, "item", number, obj)


def check_text(obj: dict[str, Any], where: str) -> None:
    """Refuse a record holding a lone surrogate anywhere, naming the field."""
    try:
        found = _lone_surrogate(obj, ())
    except RecursionError:
        raise DatasetError(f"{where}: {TOO_DEEP}") from None
    if found is not None:
        loc, char = found
        raise DatasetError(
            f"{where}: {field_subject(loc)} holds a lone surrogate (\\u{ord(char):04x}), which "
            "is not text"
        )


def _lone_surrogate(
    value: Any, loc: tuple[str | int, ...]
) -> tuple[tuple[str | int, ...], str] | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return loc, value[exc.start]
        return None
    items: Iterable[tuple[str | int, Any]]
    if isinstance(value, dict):
        for key in value:
            if _lone_surrogate(key, ()) is not None:
                return loc, next(c for c in key if "\ud800" <= c <= "\udfff")
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _lone_surrogate(item, (*loc, key))
        if found is not None:
            return found
    return None


def field_subject(loc: Sequence[str | int]) -> str:
    """``"answers"``, ``"qa_pairs" item 2``, ``"answers_objects[1].spans" item 3``: a field's
    path with 1-based item numbers, the last one said as "item N"."""
    if not loc:
        return "the record"
    *path, last = loc
    if isinstance(last, int) and path:
        return f'"{_field_path(path)}" item {last + 1}'
    return f'"{_field_path([*path, last])}"'


def _field_path(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _json_message(exc: json.JSONDecodeError) -> str:
    # Some messages end in "at" ("Unterminated string starting at"); don't say "at at".
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"
