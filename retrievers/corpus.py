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

Bad lines (each an error naming its line, or with ``skip_bad_lines`` skipped and counted by
kind in ``CorpusStats.skipped_by_kind``):

* ``invalid UTF-8``, ``invalid JSON``, ``not an object``;
* ``bad id``: no id, or one that is not a non-empty string or integer;
* ``bad field``: no text/contents, or a field that is not a string;
* ``empty passage``: neither title nor text has a non-space character (nothing to search);
* ``duplicate id``: an id seen on an earlier line. The first line wins: a later passage with
  the same id would silently replace or shadow it, and which one a user meant is unknowable;
* ``line too long``: over ``MAX_LINE_BYTES`` (16 MiB). Longer lines are read in pieces and
  never held in memory, so a file that is not JSONL at all (one huge line) fails at once
  instead of exhausting memory. Passages up to the limit (a whole long article) are indexed;
* ``invalid Unicode``: a field holding a lone surrogate (``"\\ud800"`` is valid JSON but no
  text: no index, no prompt and no UTF-8 file can hold it).

A UTF-8 byte order mark at the start of the file is ignored. A gzip file (recognised by its
bytes, whatever its name) is decompressed as it is read; other compressions (bzip2, xz, zstd,
zip) are named in the error.

The corpora the papers used come in other forms (DPR's ``psgs_w100.tsv``, HotpotQA's Wikipedia
dump): ``corpus_formats.py`` reads them, picked from the path or by ``format=``, and their
records go through the same checks (bad record kinds, duplicate ids, ``skip_bad_lines``).
"""

from __future__ import annotations

import codecs
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from noterag.base.errors import CorpusError
from noterag.base.files import UnreadableJSON, read_json

from .corpus_files import READ_CHUNK, GzipCorpus, open_corpus
from .corpus_formats import (
    JSONL,
    BadRecord,
    SeenIds,
    corpus_format,
    open_check,
    read_records,
)

Passage = dict[str, str]

# One passage per line, so a line longer than this is no passage (a binary file, a JSON array
# on one line): it is rejected without being held whole in memory.
MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass
class CorpusStats:
    """What a pass over a corpus saw; filled in while ``iter_corpus`` is consumed."""

    passages: int = 0
    skipped: int = 0
    # (line number, reason) of the first skipped lines, to show the user a sample.
    skipped_examples: list[tuple[int, str]] = field(default_factory=list)
    # kind of bad line ("invalid JSON", "duplicate id", ...) -> lines skipped
    skipped_by_kind: Counter[str] = field(default_factory=Counter)
    bytes_read: int = 0

    def record_skip(self, line_no: int, reason: str, kind: str = "bad line") -> None:
        self.skipped += 1
        self.skipped_by_kind[kind] += 1
        if len(self.skipped_examples) < 10:
            self.skipped_examples.append((line_no, reason))


class _BadLine(Exception):
    """A line that is not a passage; the reason is one line of text, ``kind`` its category."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind


def iter_corpus(
    path: str | Path,
    *,
    skip_bad_lines: bool = False,
    stats: CorpusStats | None = None,
    format: str | None = None,
) -> Iterator[Passage]:
    """Yield ``{"id", "title", "text"}`` dicts (all ``str``) from a JSONL corpus.

    Blank lines are ignored. A bad line (invalid JSON or UTF-8, not an object, no id or text,
    a duplicate id) raises ``CorpusError`` naming the file and line, unless ``skip_bad_lines``
    is set: then it is skipped and counted in ``stats.skipped`` (pass a ``CorpusStats`` to read
    the counts; ``stats.bytes_read`` also drives byte-based progress bars). ``format`` names a
    corpus format of ``corpus_formats`` (default: from the path).
    """
    path = Path(path)
    stats = stats if stats is not None else CorpusStats()
    fmt = corpus_format(path, format) if path.exists() else JSONL
    if fmt != JSONL:
        yield from _iter_records(path, fmt, skip_bad_lines, stats)
        return
    handle = open_corpus(path)
    # A gzip file's progress is its compressed bytes, the size a progress bar knows.
    file_offset = handle.file_offset if isinstance(handle, GzipCorpus) else None

    # id -> first line number; needed to name both lines of a duplicate. Ids are short, so
    # this stays far below the index's own memory even for millions of passages.
    seen: dict[str, int] = {}
    line_no = 0
    with handle:
        try:
            for line_no, (raw, size) in enumerate(_lines(handle), start=1):
                stats.bytes_read = file_offset() if file_offset else stats.bytes_read + size
                if line_no == 1 and raw is not None and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]  # a byte order mark some editors write
                try:
                    if raw is None:
                        raise _BadLine(
                            f"line is {size:,} bytes, over the {MAX_LINE_BYTES // 2**20} MiB "
                            "limit for one passage",
                            "line too long",
                        )
                    if not raw.strip():
                        continue
                    passage = _parse_line(raw)
                    first = seen.get(passage["id"])
                    if first is not None:
                        raise _BadLine(
                            f"duplicate id {passage['id']!r} (first seen on line {first})",
                            "duplicate id",
                        )
                except _BadLine as exc:
                    if not skip_bad_lines:
                        raise CorpusError(
                            f"{path.name} line {line_no}: {exc} (--skip-bad-lines skips such lines)"
                        ) from None
                    stats.record_skip(line_no, str(exc), exc.kind)
                    continue
                seen[passage["id"]] = line_no
                stats.passages += 1
                yield passage
        except (OSError, EOFError, zlib.error) as exc:
            # Reading itself failed: a cut or corrupt gzip stream, a disk error.
            what = "the gzip data is damaged" if file_offset else "cannot read the file"
            raise CorpusError(
                f"{path.name} line {line_no + 1}: {what} ({getattr(exc, 'strerror', None) or exc})"
            ) from None


def _iter_records(
    path: Path, fmt: str, skip_bad_lines: bool, stats: CorpusStats
) -> Iterator[Passage]:
    """The passages of a ``corpus_formats`` corpus, checked as JSONL lines are."""

    def progress(done: int) -> None:
        stats.bytes_read = done

    seen = SeenIds()
    for where, number, item in read_records(path, fmt, progress):
        try:
            if isinstance(item, BadRecord):
                raise _BadLine(str(item), item.kind)
            passage = _checked(item)
            if not seen.add(passage["id"]):
                raise _BadLine(f"duplicate id {passage['id']!r}", "duplicate id")
        except _BadLine as exc:
            if not skip_bad_lines:
                raise CorpusError(
                    f"{path.name} {where}: {exc} (--skip-bad-lines skips such records)"
                ) from None
            stats.record_skip(number, f"{where}: {exc}", exc.kind)
            continue
        stats.passages += 1
        yield passage


def _checked(passage: Passage) -> Passage:
    if not passage["id"].strip():
        raise _BadLine('empty "id"', "bad id")
    if not passage["title"].strip() and not passage["text"].strip():
        raise _BadLine("empty passage (no title and no text)", "empty passage")
    _check_unicode(passage, "text")
    return passage


def check_corpus(path: str | Path, format: str | None = None) -> None:
    """Raise ``CorpusError`` now if the corpus at ``path`` cannot be read (a typo in the path,
    an unknown format), before an index build creates anything."""
    path = Path(path)
    if not path.exists():
        raise CorpusError(f"corpus file not found: {path}")
    fmt = corpus_format(path, format)
    if fmt == JSONL:
        open_corpus(path).close()
    else:
        open_check(path, fmt)


def _lines(handle: BinaryIO) -> Iterator[tuple[bytes | None, int]]:
    """(line, its size in bytes) for each line; ``None`` instead of a line over the limit,
    which is read through in pieces and dropped."""
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        while (piece := handle.readline(READ_CHUNK)) and not piece.endswith(b"\n"):
            size += len(piece)
        yield None, size + len(piece)


def _parse_line(raw: bytes) -> Passage:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadLine(f"not valid UTF-8 (byte {exc.start})", "invalid UTF-8") from None
    try:
        obj = read_json(line)
    except json.JSONDecodeError as exc:
        raise _BadLine(
            f"not valid JSON ({exc.msg} at column {exc.colno})", "invalid JSON"
        ) from None
    except UnreadableJSON as exc:
        raise _BadLine(str(exc), "invalid JSON") from None
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}", "not an object")
    passage = {"id": _passage_id(obj), **_title_and_text(obj)}
    if b"\\u" in raw:  # only a JSON \u escape makes a lone surrogate, decoded UTF-8 never
        _check_unicode(passage, "text" if "text" in obj else "contents")
    if not passage["title"].strip() and not passage["text"].strip():
        raise _BadLine("empty passage (no title and no text)", "empty passage")
    return passage


def _check_unicode(passage: Passage, text_field: str) -> None:
    """Refuse a field holding a lone surrogate: valid JSON, but no text (UTF-8 cannot encode
    it, so the index, a prompt or a results file would fail on it later, far from its line)."""
    for key in ("id", "title", "text"):
        value = passage[key]
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            name = key if key == "id" or text_field == "text" else "contents"
            raise _BadLine(
                f'"{name}" holds a lone surrogate (\\u{ord(value[exc.start]):04x}), which is not '
                "text",
                "invalid Unicode",
            ) from None


def _passage_id(obj: dict[str, Any]) -> str:
    raw_id = obj.get("id")
    # bool is an int subclass; an id of `true` is almost certainly a broken export.
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        if raw_id is None:
            raise _BadLine('missing "id"', "bad id")
        raise _BadLine(f'"id" must be a string or integer, got {type(raw_id).__name__}', "bad id")
    passage_id = str(raw_id)
    if not passage_id.strip():
        raise _BadLine('empty "id"', "bad id")
    return passage_id


def _title_and_text(obj: dict[str, Any]) -> dict[str, str]:
    if "text" in obj:
        text, title = obj["text"], obj.get("title") or ""
        if not isinstance(text, str):
            raise _BadLine(f'"text" must be a string, got {type(text).__name__}', "bad field")
        if not isinstance(title, str):
            raise _BadLine(f'"title" must be a string, got {type(title).__name__}', "bad field")
        return {"title": title, "text": text}
    if "contents" in obj:
        contents = obj["contents"]
        if not isinstance(contents, str):
            raise _BadLine(
                f'"contents" must be a string, got {type(contents).__name__}', "bad field"
            )
        return split_contents(contents)
    raise _BadLine('missing "text" (or "contents")', "bad field")


def split_contents(contents: str) -> dict[str, str]:
    """Split a FlashRAG ``contents`` string into title (first line, quotes stripped) and text."""
    if "\n" not in contents:
        return {"title": "", "text": contents}
    title, text = contents.split("\n", 1)
    return {"title": title.strip().strip('"'), "text": text}
