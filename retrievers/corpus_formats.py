"""The corpora the papers retrieved from, read in the form they are downloaded in.

``iter_corpus`` (``corpus.py``) reads these besides noterag's JSONL, chosen by
``corpus_format`` from the path (or named with ``format=``/``--corpus-format``); every
``noterag index`` backend (BM25, dense, Elasticsearch) streams them the same way, with the
progress bar over the bytes read. ``docs/corpora.md`` says where each is downloaded.

* ``dpr-tsv``: DPR's Wikipedia split, ``psgs_w100.tsv`` or ``psgs_w100.tsv.gz`` (21,015,324
  passages of 100 words; ALCE's and DeepNote's corpus for ASQA and StrategyQA). A header
  ``id<TAB>text<TAB>title``, then one passage a line; fields are CSV-quoted (``""`` inside
  quotes), which is how ALCE (``csv.reader``) and DeepNote (``pandas.read_csv``) read it.
* ``hotpotqa-wiki``: HotpotQA's introductory-paragraph Wikipedia dump
  (``enwiki-20171001-pages-meta-current-withlinks-abstracts.tar.bz2``, 5,233,329 passages;
  IRCoT's, DeepNote's and Adaptive-Note's HotpotQA corpus): the downloaded ``.tar.bz2`` itself
  (streamed, never unpacked to disk) or the folder it unpacks to, holding ``*/wiki_*.bz2``
  files of JSON lines ``{id, url, title, text: [sentences]}``. A passage's text is its
  sentences joined with ``""`` (they carry their own spaces), as DeepNote's and Adaptive-Note's
  ``index_hotpotqa.py`` do; IRCoT's ``build_index.py`` strips each and joins with ``" "``.

The 2WikiMultihopQA and MuSiQue corpora of IRCoT and the papers are the paragraphs of every
question of the datasets' own train/dev/test files, pooled and deduplicated:
``noterag corpus-from raw_data/musique/ --out musique-corpus.jsonl`` writes them
(``noterag.datasets.pool_corpus``).
"""

from __future__ import annotations

import bz2
import csv
import io
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from noterag.base.errors import CorpusError
from noterag.base.files import UnreadableJSON, read_json

from .corpus_files import open_corpus

JSONL = "jsonl"
DPR_TSV = "dpr-tsv"
HOTPOTQA_WIKI = "hotpotqa-wiki"
CORPUS_FORMATS = (JSONL, DPR_TSV, HOTPOTQA_WIKI)
DPR_HEADER = ["id", "text", "title"]
_WIKI_GLOB = "wiki_*.bz2"

# What a reader yields: where the record is ("line 7", "AA/wiki_00 line 3") for messages, a
# record number for CorpusStats, and the passage or why the record is none.
Record = tuple[str, int, "dict[str, str] | BadRecord"]


class BadRecord(Exception):
    """A record that is not a passage; ``kind`` is its category in ``CorpusStats``."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.kind = kind


def check_format(name: str) -> str:
    if name not in CORPUS_FORMATS:
        raise CorpusError(f"unknown corpus format {name!r} (known: {', '.join(CORPUS_FORMATS)})")
    return name


def corpus_format(path: Path, format: str | None = None) -> str:
    """The format of the corpus at ``path``: ``format`` if given, else from its name (a
    folder of ``wiki_*.bz2`` files or a ``.tar.bz2``: ``hotpotqa-wiki``; ``.tsv`` or
    ``.tsv.gz``: ``dpr-tsv``; anything else ``jsonl``)."""
    if format is not None:
        return check_format(format)
    name = path.name.lower()
    if path.is_dir():
        if next(path.rglob(_WIKI_GLOB), None) is not None:
            return HOTPOTQA_WIKI
        raise CorpusError(
            f"corpus path is a directory, not a JSONL file: {path} (a folder is read only as "
            "HotpotQA's Wikipedia dump, holding */wiki_*.bz2 files; none here)"
        )
    if name.endswith((".tar.bz2", ".tbz2")):
        return HOTPOTQA_WIKI
    if name.endswith((".tsv", ".tsv.gz")):
        return DPR_TSV
    return JSONL


def corpus_bytes(path: Path) -> int:
    """What the progress bar counts to: the file's size, or a folder's files' sizes."""
    if path.is_dir():
        return sum(p.stat().st_size for p in _wiki_files(path))
    return path.stat().st_size


def read_records(path: Path, fmt: str, progress: Callable[[int], None]) -> Iterator[Record]:
    """The records of a ``dpr-tsv`` or ``hotpotqa-wiki`` corpus; ``progress(bytes)`` is told
    how far into the input reading has got."""
    if fmt == DPR_TSV:
        return _dpr_records(path, progress)
    if fmt == HOTPOTQA_WIKI:
        return _wiki_records(path, progress)
    raise CorpusError(f"{fmt} is not read record by record")  # jsonl: corpus.iter_corpus


# --------------------------------------------------------------------------------------------
# DPR's TSV


def _dpr_records(path: Path, progress: Callable[[int], None]) -> Iterator[Record]:
    handle = open_corpus(path)  # gzip decompressed as it is read, by its bytes
    offset = getattr(handle, "file_offset", handle.tell)
    # A passage is short; the limit only keeps a file that is no TSV from filling memory.
    csv.field_size_limit(16 * 1024 * 1024)
    with handle, io.TextIOWrapper(handle, encoding="utf-8", newline="") as text:
        reader = csv.reader(text, delimiter="\t")
        try:
            header = next(reader, None)
            if header is None:
                return
            if [cell.strip().lstrip("\ufeff") for cell in header] != DPR_HEADER:
                raise CorpusError(
                    f"{path.name} line 1: expected DPR's header id<TAB>text<TAB>title, got "
                    f"{'<TAB>'.join(header)[:80]!r}"
                )
            for n, row in enumerate(reader, start=1):
                where = f"line {reader.line_num}"
                if n % 1000 == 0:
                    progress(offset())
                if len(row) != 3:
                    yield (
                        where,
                        reader.line_num,
                        BadRecord(
                            f"expected 3 tab-separated fields (id, text, title), got {len(row)}",
                            "bad row",
                        ),
                    )
                    continue
                passage_id, body, title = row
                yield where, reader.line_num, {"id": passage_id, "title": title, "text": body}
            progress(offset())
        except UnicodeDecodeError as exc:
            raise CorpusError(
                f"{path.name} after line {reader.line_num}: not valid UTF-8 ({exc.reason})"
            ) from None
        except csv.Error as exc:
            raise CorpusError(f"{path.name} line {reader.line_num}: {exc}") from None


# --------------------------------------------------------------------------------------------
# HotpotQA's Wikipedia dump


def _wiki_files(folder: Path) -> list[Path]:
    # Sorted: the dump's own order (AA/wiki_00, AA/wiki_01, ..., AB/...), whatever the disk's.
    return sorted(folder.rglob(_WIKI_GLOB))


def _wiki_records(path: Path, progress: Callable[[int], None]) -> Iterator[Record]:
    if path.is_dir():
        done = 0
        for file in _wiki_files(path):
            name = file.relative_to(path).as_posix()
            yield from _wiki_lines(name, _read(file), path)
            done += file.stat().st_size
            progress(done)
        return
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
    with raw:
        try:
            # "r|bz2": a stream, member after member, never seeking nor unpacking to disk.
            with tarfile.open(fileobj=raw, mode="r|bz2") as archive:
                for member in archive:
                    if not (member.isfile() and Path(member.name).match(_WIKI_GLOB)):
                        continue
                    member_file = archive.extractfile(member)
                    if member_file is None:
                        continue
                    yield from _wiki_lines(member.name, member_file.read(), path)
                    progress(raw.tell())
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise CorpusError(
                f"{path.name}: not a readable .tar.bz2 of HotpotQA's Wikipedia dump ({exc})"
            ) from None


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise CorpusError(f"cannot read {file}: {exc.strerror or exc}") from None


def _wiki_lines(name: str, compressed: bytes, corpus: Path) -> Iterator[Record]:
    try:
        data = bz2.decompress(compressed)
    except (OSError, ValueError, EOFError) as exc:
        raise CorpusError(f"{corpus.name}: {name} is not readable bzip2 data ({exc})") from None
    for line_no, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        yield f"{name} line {line_no}", line_no, _wiki_passage(raw)


def _wiki_passage(raw: bytes) -> dict[str, str] | BadRecord:
    try:
        obj = read_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return BadRecord(f"not valid JSON ({exc})", "invalid JSON")
    except UnreadableJSON as exc:
        return BadRecord(str(exc), "invalid JSON")
    if not isinstance(obj, dict):
        return BadRecord(f"expected a JSON object, got {type(obj).__name__}", "not an object")
    sentences = obj.get("text")
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        return BadRecord('"text" is not a list of sentences', "bad field")
    passage_id, title = obj.get("id"), obj.get("title")
    if isinstance(passage_id, bool) or not isinstance(passage_id, (str, int)):
        return BadRecord('missing or bad "id"', "bad id")
    if not isinstance(title, str):
        return BadRecord('"title" is not a string', "bad field")
    # index_hotpotqa.py (DeepNote, Adaptive-Note): "text": "".join(data["text"])
    return {"id": str(passage_id), "title": title, "text": "".join(sentences)}


class SeenIds:
    """The ids read so far, for duplicate checks over corpora of millions of passages:
    decimal ids (DPR's 1..21,015,324) as bits, any other id in a set."""

    def __init__(self) -> None:
        self._bits = bytearray()
        self._other: set[str] = set()

    def add(self, passage_id: str) -> bool:
        """Record ``passage_id``; False if it was already there."""
        if passage_id.isascii() and passage_id.isdigit() and len(passage_id) < 10:
            n = int(passage_id)
            if passage_id != str(n):  # "007" is another id than "7"
                return self._add_other(passage_id)
            byte, bit = divmod(n, 8)
            if byte >= len(self._bits):
                self._bits.extend(bytes(max(byte + 1 - len(self._bits), len(self._bits))))
            if self._bits[byte] >> bit & 1:
                return False
            self._bits[byte] |= 1 << bit
            return True
        return self._add_other(passage_id)

    def _add_other(self, passage_id: str) -> bool:
        if passage_id in self._other:
            return False
        self._other.add(passage_id)
        return True


def open_check(path: Path, fmt: str) -> None:
    """Fail now (``CorpusError``) if the corpus cannot be opened; reads nothing much."""
    if fmt == HOTPOTQA_WIKI:
        if path.is_dir():
            return  # corpus_format found wiki_*.bz2 files in it
        _probe(path)
        return
    open_corpus(path).close()


def _probe(path: Path) -> BinaryIO:
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"corpus file not found: {path}") from None
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
    with handle:
        if handle.read(3) != b"BZh":
            raise CorpusError(f"{path.name} is not a .tar.bz2 archive (no bzip2 header)")
    return handle
