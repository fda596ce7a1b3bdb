"""Opening a corpus file: plain, or gzip decompressed as it is read; other compressions
refused with the command that decompresses them. Both the JSONL reader (``corpus``) and the
other formats' readers (``corpus_formats``) open files through here.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO, cast

from noterag.base.errors import CorpusError

# how much of a file's start is peeked at to tell text from a compressed file
READ_CHUNK = 1024 * 1024

_GZIP_MAGIC = b"\x1f\x8b\x08"  # and deflate, the only method gzip uses
# The first bytes of the compressed files a corpus may come as, for an error that names them.
_COMPRESSED = (
    (b"BZh", b"1AY&SY", "bzip2", "bunzip2"),
    (b"\xfd7zXZ\x00", b"", "xz", "unxz"),
    (b"\x28\xb5\x2f\xfd", b"", "zstd", "unzstd"),
    (b"PK\x03\x04", b"", "zip", "unzip"),
)


class GzipCorpus(gzip.GzipFile):
    """A gzip corpus: closes its file with it and says how far into the file reading got."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()

    def file_offset(self) -> int:
        return self._raw.tell()


def open_corpus(path: Path) -> BinaryIO:
    """Open a corpus file for reading (a gzip file decompressed as it is read), or raise
    ``CorpusError`` saying why it cannot be."""
    try:
        raw = path.open("rb")
    except FileNotFoundError:
        raise CorpusError(f"corpus file not found: {path}") from None
    except IsADirectoryError:
        raise CorpusError(f"corpus path is a directory, not a JSONL file: {path}") from None
    except OSError as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
    try:
        head = raw.peek(READ_CHUNK)  # peek: a pipe cannot seek back
    except OSError as exc:
        raw.close()
        raise CorpusError(f"cannot read corpus {path}: {exc.strerror or exc}") from None
    if not _compressed(head):
        return raw  # a text line that happens to start like a compressed file is a bad line
    if head.startswith(_GZIP_MAGIC):
        return cast(BinaryIO, GzipCorpus(raw))
    for magic, block, kind, tool in _COMPRESSED:
        if head.startswith(magic) and block in head[:16]:
            raw.close()
            raise CorpusError(
                f"{path.name} is {kind}-compressed: decompress it first (`{tool} {path}`); "
                "gzip files are read as they are"
            )
    return raw


def _compressed(head: bytes) -> bool:
    """Whether the file's first bytes look compressed: not text (the first line is not UTF-8)
    and, for gzip, a stream zlib can start to read."""
    try:
        head.split(b"\n", 1)[0].decode("utf-8")
        return False
    except UnicodeDecodeError:
        pass
    if head.startswith(_GZIP_MAGIC):
        try:
            zlib.decompressobj(wbits=31).decompress(head[:4096], 1)
        except zlib.error:
            return False
    return True
