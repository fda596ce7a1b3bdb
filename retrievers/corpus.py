"""Streaming reader for passage corpora in JSONL.

Two line formats are accepted:

* ``{"id": ..., "title": ..., "text": ...}`` (``title`` optional, defaults to ``""``);
* ``{"id": ..., "contents": ...}`` as written by FlashRAG / Pyserini: the first line of
  ``contents`` is the title, the rest is the text. FlashRAG's Wikipedia dumps quote the title
  (``"\\"Aaron\\"\\nAaron is ..."``); the quotes are stripped, as FlashRAG's own reader does.
  A ``contents`` value without a newline is all text (empty title), so a title-less passage
  still gets indexed.

The file is read line by line, never loaded whole, so corpora of millions of passages stream
in constant memory. Errors name the file and the 1-based line number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from noterag.errors import CorpusError

Passage = dict[str, str]


@dataclass
class CorpusStats:
    """What a pass over a corpus saw; filled in while ``iter_corpus`` is consumed."""

    passages: int = 0
    skipped: int = 0
    # (line number, reason) of the first skipped lines, to show the user a sample.
    skipped_examples: list[tuple[int, str]] = field(default_factory=list)
    bytes_read: int = 0

    def record_skip(self, line_no: int, reason: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < 10:
            self.skipped_examples.append((line_no, reason))


class _BadLine(Exception):
    """A line that is not a passage; the reason is one line of text."""


def iter_corpus(
    path: str | Path,
    *,
    skip_bad_lines: bool = False,
    stats: CorpusStats | None = None,
) -> Iterator[Passage]:
    """Yield ``{"id", "title", "text"}`` dicts (all ``str``) from a JSONL corpus.

    Blank lines are ignored. A bad line (invalid JSON or UTF-8, not an object, no id or text,
    a duplicate id) raises ``CorpusError`` naming the file and line, unless ``skip_bad_lines``
    is set: then it is skipped and counted in ``stats.skipped`` (pass a ``CorpusStats`` to read
    the counts; ``stats.bytes_read`` also drives byte-based progress bars).
    """
    path = Path(path)
    stats = stats if stats is not None else CorpusStats()
    handle = open_corpus(path)

    # id -> first line number; needed to name both lines of a duplicate. Ids are short, so
    # this stays far below the index's own memory even for millions of passages.
    seen: dict[str, int] = {}
    with handle:
        for line_no, raw in enumerate(handle, start=1):
            stats.bytes_read += len(raw)
            if not raw.strip():
                continue
            try:
                passage = _parse_line(raw)
                first = seen.get(passage["id"])
                if first is not None:
                    raise _BadLine(f"duplicate id {passage['id']!r} (first seen on line {first})")
            except _BadLine as exc:
                if not skip_bad_lines:
                    raise CorpusError(f"{path.name} line {line_no}: {exc}") from None
                stats.record_skip(line_no, str(exc))
                continue
            seen[passage["id"]] = line_no
            stats.passages += 1
            yield passage


def open_corpus(path: Path) -> BinaryIO:
    """Open a corpus file for reading, or raise ``CorpusError`` saying why it cannot be."""
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"corpus file not found: {path}") from None
    except IsADirectoryError:
        raise CorpusError(f"corpus path is a directory, not a JSONL file: {path}") from None
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from None


def _parse_line(raw: bytes) -> Passage:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadLine(f"not valid UTF-8 (byte {exc.start})") from None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _BadLine(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}")
    return {"id": _passage_id(obj), **_title_and_text(obj)}


def _passage_id(obj: dict[str, Any]) -> str:
    raw_id = obj.get("id")
    # bool is an int subclass; an id of `true` is almost certainly a broken export.
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        if raw_id is None:
            raise _BadLine('missing "id"')
        raise _BadLine(f'"id" must be a string or integer, got {type(raw_id).__name__}')
    passage_id = str(raw_id)
    if not passage_id.strip():
        raise _BadLine('empty "id"')
    return passage_id


def _title_and_text(obj: dict[str, Any]) -> dict[str, str]:
    if "text" in obj:
        text, title = obj["text"], obj.get("title") or ""
        if not isinstance(text, str):
            raise _BadLine(f'"text" must be a string, got {type(text).__name__}')
        if not isinstance(title, str):
            raise _BadLine(f'"title" must be a string, got {type(title).__name__}')
        return {"title": title, "text": text}
    if "contents" in obj:
        contents = obj["contents"]
        if not isinstance(contents, str):
            raise _BadLine(f'"contents" must be a string, got {type(contents).__name__}')
        return split_contents(contents)
    raise _BadLine('missing "text" (or "contents")')


def split_contents(contents: str) -> dict[str, str]:
    """Split a FlashRAG ``contents`` string into title (first line, quotes stripped) and text."""
    if "\n" not in contents:
        return {"title": "", "text": contents}
    title, text = contents.split("\n", 1)
    return {"title": title.strip().strip('"'), "text": text}
