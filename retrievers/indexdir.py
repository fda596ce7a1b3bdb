"""The index directory every on-disk noterag index shares (BM25 and dense).

An index is a directory holding the engine's files plus ``noterag-index.json`` (the manifest:
``kind``, ``format_version``, ``count`` and whatever the engine records). This module owns
what does not depend on the engine:

* ``IndexBuild``: a build goes into a temporary sibling directory and is swapped into place
  only when complete, so an interrupted or failed build never leaves a partial index at the
  output path (and leaves a previous index untouched);
* ``refuse_to_clobber``: a build never replaces a directory that is not a noterag index;
* ``read_manifest`` and ``not_found``: loading, with errors that name what a killed build left
  behind (``interrupted_build_note``);
* ``ProgressReporter``: the progress bar over the corpus file while it is read.

Durability follows ``noterag.base.files``: the built files are fsynced before the swap and the
parent directory after it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import sys
import uuid
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

from noterag.base.errors import ConfigError, CorpusError, IndexNotFoundError, NoteragError
from noterag.base.files import atomic_write_json, fsync_dir

from .corpus import CorpusStats
from .corpus_formats import corpus_bytes

MANIFEST_NAME = "noterag-index.json"


# --------------------------------------------------------------------------------------------
# Building


def refuse_to_clobber(index_dir: Path) -> None:
    """Never replace a directory that is not ours: it could be the user's data."""
    if not index_dir.exists():
        return
    if not index_dir.is_dir():
        raise ConfigError(f"index output {index_dir} exists and is not a directory")
    if any(index_dir.iterdir()) and not (index_dir / MANIFEST_NAME).is_file():
        raise ConfigError(
            f"index output {index_dir} exists and is not a noterag index "
            f"(no {MANIFEST_NAME}); choose another directory or remove it"
        )
    # An index directory may hold the user's own files too (notes put next to it): replacing
    # the index would delete them, so --force replaces an index only when it holds nothing else.
    foreign = foreign_files(index_dir)
    if foreign:
        more = f" and {len(foreign) - 3:,} more" if len(foreign) > 3 else ""
        shown = ", ".join(foreign[:3]) + more
        raise ConfigError(
            f"index output {index_dir} holds files the index did not write ({shown}); "
            "rebuilding replaces the whole directory: move them elsewhere first"
        )


def index_files(index_dir: Path) -> list[str]:
    """Every file under ``index_dir`` but the manifest, as sorted relative POSIX paths."""
    return sorted(
        p.relative_to(index_dir).as_posix()
        for p in index_dir.rglob("*")
        if p.is_file() and p.name != MANIFEST_NAME
    )


def foreign_files(index_dir: Path) -> list[str]:
    """The files in an index directory that its index did not write: those not in the
    manifest's ``files`` (the directory's files when the manifest was last written), or, for
    an index built before that list, those changed after the manifest."""
    manifest_path = index_dir / MANIFEST_NAME
    try:
        listed = json.loads(manifest_path.read_text(encoding="utf-8")).get("files")
        written = manifest_path.stat().st_mtime
    except (OSError, ValueError, AttributeError):
        return []  # an unreadable manifest: the loader's errors say so
    present = index_files(index_dir)
    if isinstance(listed, list):
        ours = set(listed)
        return [name for name in present if name not in ours]
    return [name for name in present if (index_dir / name).stat().st_mtime > written]


class IndexWriteError(NoteragError):
    """An index cannot be written where it was asked to go (the message names it and why)."""


class IndexBuild:
    """One build of an index directory, replacing any noterag index already at ``index_dir``.

        build = IndexBuild(out)         # resolves the path; refuses a directory not ours
        ...                             # cheap checks: nothing is written yet
        with build:                     # creates the temporary sibling, build.path
            write the engine's files into build.path
            build.finish(manifest)      # writes the manifest and swaps the build into place
        build.index_dir                 # the resolved output path

    Leaving the block without ``finish`` (an error, an interrupt) removes the temporary
    directory and leaves ``index_dir`` as it was.
    """

    def __init__(self, index_dir: str | os.PathLike[str]) -> None:
        # Resolved so that "." or "idx/.." still have a parent to hold the temporary sibling.
        self.index_dir = Path(index_dir).resolve()
        refuse_to_clobber(self.index_dir)
        self._check_writable()
        # A sibling, so the final rename stays on one filesystem (atomic). Not mkdtemp: its
        # 0700 mode would survive the rename and hide the index from other users.
        self.path = self.index_dir.with_name(
            f".{self.index_dir.name}.building-{uuid.uuid4().hex[:12]}"
        )

    def _check_writable(self) -> None:
        """Refuse, before the corpus is read (or a model loaded), an output whose parent is a
        file or cannot be written."""
        existing = self.index_dir.parent
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise self.write_error(f"{existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise self.write_error(
                f"{existing} is not writable (no permission, or a read-only file system)"
            )

    def write_error(self, why: str) -> IndexWriteError:
        return IndexWriteError(f"cannot write the index to {self.index_dir}: {why}")

    def __enter__(self) -> Self:
        try:
            self.index_dir.parent.mkdir(parents=True, exist_ok=True)
            self.path.mkdir()
        except OSError as exc:
            raise self.write_error(exc.strerror or str(exc)) from None
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        # After finish, self.path holds the old index (or nothing): removed either way.
        shutil.rmtree(self.path, ignore_errors=True)
        if isinstance(exc, OSError):  # the engine's files or the swap: disk full, read-only
            raise self.write_error(exc.strerror or str(exc)) from None

    def finish(self, manifest: dict[str, Any]) -> None:
        """Write the manifest and put the complete build at ``index_dir``."""
        write_manifest(self.path, manifest)
        _fsync_files(self.path)
        swap_into_place(self.path, self.index_dir)
        fsync_dir(self.index_dir.parent)


def _fsync_files(directory: Path) -> None:
    # The engine's files must be on disk before the name points at them (the policy of
    # noterag.base.files); tantivy syncs its own on commit, which makes these calls cheap for it.
    for root, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(root)


def require_passages(corpus_path: Path, stats: CorpusStats) -> None:
    """Refuse to finish a build that indexed nothing: an empty index would answer every
    question from nothing, silently."""
    if stats.passages:
        return
    if not stats.skipped:
        raise CorpusError(
            f"{corpus_path.name} holds no passages (the file is empty or only blank lines); "
            "nothing to index"
        )
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(stats.skipped_by_kind.items()))
    line, reason = stats.skipped_examples[0]
    raise CorpusError(
        f"{corpus_path.name}: all {stats.skipped:,} lines were skipped as bad ({kinds}; the "
        f"first, line {line}: {reason}); nothing to index"
    )


def new_manifest(
    kind: str, format_version: int, corpus_path: Path, stats: CorpusStats, **fields: Any
) -> dict[str, Any]:
    """A manifest: what every index records, around the engine's own ``fields``. ``build_id``
    is new for every build (and every change in place): an evaluation run records it and
    refuses to mix answers from two different indexes under one path."""
    return {
        "kind": kind,
        "format_version": format_version,
        "count": stats.passages,
        "skipped_lines": stats.skipped,
        **fields,
        "corpus": str(corpus_path.resolve()),
        "created": now(),
        "build_id": new_build_id(),
    }


def new_build_id() -> str:
    return uuid.uuid4().hex[:16]


def index_identity(index_dir: str | os.PathLike[str]) -> str | None:
    """What identifies the content of the index at ``index_dir``: its manifest's ``build_id``
    (an index built before build ids: a digest of its manifest, which records when it was
    built and last changed); None when there is no readable manifest."""
    try:
        text = (Path(index_dir) / MANIFEST_NAME).read_text(encoding="utf-8")
        manifest = json.loads(text)
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    build_id = manifest.get("build_id")
    if isinstance(build_id, str) and build_id:
        return build_id
    return "manifest-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def now() -> str:
    """A manifest's timestamp: UTC, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_manifest(index_dir: Path, manifest: dict[str, Any]) -> None:
    """Write (or rewrite) ``index_dir``'s manifest, atomically, with the files the index holds
    now (``files``: what a rebuild may replace, ``foreign_files``) and a mark of each one the
    engine never rewrites (``marks``, checked at load by ``check_marks``)."""
    files = index_files(index_dir)
    marks = {name: file_mark(index_dir / name) for name in files if not _rewritten(name)}
    atomic_write_json(index_dir / MANIFEST_NAME, manifest | {"files": files, "marks": marks})


# Files an engine rewrites in place under the same name (tantivy's segment list, its file
# bookkeeping and lock files): not marked. Every other file (a tantivy segment's .store, .idx,
# ...; the dense index's arrays) keeps its content for as long as it keeps its name.
_REWRITTEN = ("meta.json", ".managed.json")
_MARK_TAIL = 4096


def _rewritten(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base in _REWRITTEN or base.startswith(".tantivy")


def file_mark(path: Path) -> str:
    """``size:crc32`` of a file's last 4 KiB: cheap to check at every load, and different for
    two files of an index (tantivy ends each file with a footer holding its checksum)."""
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - _MARK_TAIL))
        return f"{size}:{zlib.crc32(handle.read()):08x}"


def check_marks(index_dir: Path, manifest: dict[str, Any]) -> None:
    """Refuse an index whose files are not those it was built with: segment files swapped
    between segments (or copied in from another index) would return other passages than the
    ones found, silently. A marked file that is gone was merged away by a change in place
    (its replacement is new, unmarked); an index built before marks is not checked."""
    marks = manifest.get("marks")
    if not isinstance(marks, dict):
        return
    for name, mark in marks.items():
        path = index_dir / str(name)
        try:
            now = file_mark(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise IndexDamagedError(
                f"{path} cannot be read ({exc.strerror or exc}); rebuild the index"
            ) from None
        if now != mark:
            raise IndexDamagedError(
                f"{path} is not the file this index was built with (its size or content "
                "changed: swapped, replaced or damaged), so its passages could be another's; "
                "rebuild the index"
            )


def swap_into_place(built: Path, index_dir: Path) -> None:
    """Rename ``built`` to ``index_dir``, replacing an old index.

    On Linux the two directories are exchanged in one atomic step (``built`` then holds the
    old index, which the caller removes), so a crash at any instant leaves ``index_dir`` with
    either the complete old index or the complete new one. Elsewhere the old index is moved
    aside first, then removed: a crash between the two renames leaves no index at
    ``index_dir`` and the old one in a ``.NAME.old-*`` sibling, which the loader's error names.
    Never is a partial index at ``index_dir``.
    """
    if index_dir.exists() and exchange(built, index_dir):
        return
    old = None
    if index_dir.exists():
        old = index_dir.with_name(f".{index_dir.name}.old-{uuid.uuid4().hex[:8]}")
        os.rename(index_dir, old)
    try:
        os.rename(built, index_dir)
    except BaseException:
        if old is not None:
            os.rename(old, index_dir)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2(RENAME_EXCHANGE)``); False when
    the platform, libc or filesystem cannot, so the caller falls back to two renames."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # a libc without renameat2 (glibc < 2.28, some musl)
        return False
    renameat2.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    renameat2.restype = ctypes.c_int
    result: int = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0


class ProgressReporter:
    """A rich progress bar over the corpus bytes (no counting pass over a huge file).

    ``with ProgressReporter(enabled, corpus_path, stats) as report:`` then ``report()`` now
    and then while ``stats`` (filled by ``iter_corpus``) grows."""

    def __init__(self, enabled: bool, corpus_path: Path, stats: CorpusStats) -> None:
        self._stats = stats
        self._progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]indexing[/bold] {task.description}"),
                BarColumn(),
                DownloadColumn(),
                TextColumn("{task.fields[passages]:,} passages"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                # stderr keeps stdout clean for whatever the caller prints.
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task(
                corpus_path.name, total=corpus_bytes(corpus_path), passages=0
            )

    def __enter__(self) -> Callable[[], None]:
        if self._progress is not None:
            self._progress.start()
        return self._report

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _report(self) -> None:
        if self._progress is not None:
            self._progress.update(
                self._task, completed=self._stats.bytes_read, passages=self._stats.passages
            )


# --------------------------------------------------------------------------------------------
# Loading


class IndexDamagedError(IndexNotFoundError):
    """An index's files are there but cannot be read (found on opening or mid-run): the message
    names the index (and the file, where the engine says) and how to rebuild it."""


def interrupted_build_note(index_dir: Path) -> str:
    """What a killed build left next to ``index_dir`` (for the "no index" errors), or ""."""
    index_dir = Path(index_dir)
    prefix = f".{index_dir.name}."
    try:  # not glob: the name may hold glob's special characters
        siblings = sorted(p for p in index_dir.parent.iterdir() if p.name.startswith(prefix))
    except OSError:
        return ""
    old = [p for p in siblings if p.name.startswith(f"{prefix}old-") and p.is_dir()]
    building = [p for p in siblings if p.name.startswith(f"{prefix}building-")]
    notes = []
    if old and not index_dir.exists():
        notes.append(
            f"an interrupted rebuild left the previous index in {old[-1]}: rename it to "
            f"{index_dir} to use it again"
        )
    if building:
        notes.append(
            f"{building[0]}{f' and {len(building) - 1} more' if len(building) > 1 else ''} "
            "is an unfinished build (still running, or interrupted: remove it if no build runs)"
        )
    return "; ".join(notes)


def not_found(message: str, index_dir: Path, hint: str) -> IndexNotFoundError:
    """``IndexNotFoundError(message)`` plus what an interrupted build left, then ``hint``."""
    note = interrupted_build_note(index_dir)
    return IndexNotFoundError(f"{message}; {note}; {hint}" if note else f"{message}; {hint}")


def read_manifest(
    index_dir: str | os.PathLike[str], *, kind: str, label: str, hint: str
) -> dict[str, Any]:
    """The manifest of the ``kind`` index at ``index_dir``; ``IndexNotFoundError`` when there is
    none or it is another kind. ``label`` names the kind in messages ("BM25"), ``hint`` says
    how to build one."""
    index_dir = Path(index_dir)
    if not index_dir.exists():
        raise not_found(f"no {label} index at {index_dir} (it does not exist)", index_dir, hint)
    if not index_dir.is_dir():
        raise IndexNotFoundError(f"{index_dir} is a file, not an index directory; {hint}")
    path = index_dir / MANIFEST_NAME
    if not path.is_file():
        raise not_found(
            f"{index_dir} is not a noterag {label} index (no {MANIFEST_NAME})", index_dir, hint
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexNotFoundError(f"{path} is unreadable ({exc}); rebuild the index") from None
    if not isinstance(manifest, dict):
        raise IndexNotFoundError(f"{path} is not a JSON object; rebuild the index")
    if manifest.get("kind") != kind:
        raise IndexNotFoundError(
            f"{index_dir} holds a noterag {manifest.get('kind')!r} index, not a {label} index"
        )
    check_marks(index_dir, manifest)
    return manifest


def manifest_kind(index_dir: str | os.PathLike[str]) -> str | None:
    """The ``kind`` a directory's manifest declares, or None (no manifest, unreadable)."""
    try:
        manifest = json.loads((Path(index_dir) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    return kind if isinstance(kind, str) else None
