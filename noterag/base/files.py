"""Replacing a file atomically and durably: the one way noterag rewrites a file in place.

The policy (every rewrite of a whole file: run.json, summary.json, a rewritten results.jsonl,
an index manifest, a pooled corpus):

1. the new content goes to a temporary file in the same directory (so the rename below stays
   on one filesystem), opened with plain ``open`` so it gets the user's usual permissions
   (``mkstemp``'s 0600 would survive the rename); its name holds the pid and a random part, so
   two writers never share it, and starts with a dot, so a crash leaves no file that looks
   like a result;
2. the file is flushed and fsynced: its bytes are on disk before any name points at them;
3. ``os.replace`` puts it in place: a reader sees the old file or the new one, never a mix;
4. the directory is fsynced: the new name survives a power loss too, rather than the old file
   coming back.

An error or an interrupt at any point before step 3 removes the temporary file and leaves the
old file untouched. Appending (results.jsonl's rows) is not a rewrite: the runner fsyncs each
appended line itself, and ``fsync_dir`` after creating the file.

A file noterag writes *in place* in a run directory (``.noterag.lock``, the rows appended to
``results.jsonl``, the repair of its torn tail) is opened with ``open_no_follow``: a symbolic
link at that name is refused with one line (``LinkRefusedError``), never followed, so a link
planted in a run directory cannot make noterag truncate or append to the file it points at.
The atomic rewrites above need no such care: ``os.replace`` replaces a link at ``path``
itself, never the file it points at, and the temporary file is created with ``"x"``.

A file the user names as an output (``trace --html``, ``ask --html``, ``compare --plot``) is
checked by ``check_output_file`` before any work is spent on it: it must be writable, and an
existing file is replaced only if it is empty or noterag wrote it (the caller recognises its
own files), unless the user says ``--force``. A page or plot never replaces a corpus, a note or
a photo by a slip of the command line.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from noterag.base.errors import ConfigError, NoteragError


class LinkRefusedError(NoteragError):
    """A file noterag writes in place is a symbolic link (or not a regular file)."""


def open_no_follow(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags, mode)`` that never follows a symbolic link at ``path`` (also a
    dangling one, which ``O_CREAT`` would otherwise create the target of) and takes only a
    regular file: a ``LinkRefusedError`` naming it otherwise. Other OSErrors pass through."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and os.path.islink(path)):
            raise LinkRefusedError(_link_message(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device: not a file of ours
        os.close(fd)
        raise LinkRefusedError(f"{path} is not a regular file; noterag does not write it")
    return fd


def refuse_link(path: str | os.PathLike[str]) -> None:
    """A ``LinkRefusedError`` if ``path`` is a symbolic link, or exists and is no regular file
    (a FIFO would block the read before the write): checked before a file that will be written
    in place is even read."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise LinkRefusedError(_link_message(path))
    if not stat.S_ISREG(mode):
        raise LinkRefusedError(f"{path} is not a regular file; noterag does not write it")


def _link_message(path: str | os.PathLike[str]) -> str:
    return (
        f"{path} is a symbolic link; noterag does not write through links in a run "
        "directory (remove the link, or choose another --out)"
    )


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the directory's entries (a file just created, renamed or removed) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


@contextmanager
def atomic_writer(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """A file to write ``path``'s new content into; it replaces ``path`` when the block ends
    without an exception (see the module's policy). Text is UTF-8 with ``\\n`` line ends.
    Raising inside the block (e.g. after finding there is nothing to write) leaves ``path`` as
    it was. The directory holding ``path`` must exist."""
    path = Path(path)
    tmp = _temporary_sibling(path)
    try:
        # "x": never follow or reuse a file someone else put at the temporary name.
        with (
            open(tmp, "xb") if binary else open(tmp, "x", encoding="utf-8", newline="\n")
        ) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``, atomically and durably."""
    with atomic_writer(path, binary=True) as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8), atomically and durably."""
    with atomic_writer(path) as handle:
        handle.write(text)


def atomic_write_lines(path: str | os.PathLike[str], lines: Iterable[bytes]) -> int:
    """Replace ``path`` with ``lines`` (each already ending in a newline), streamed, atomically
    and durably; returns how many were written."""
    count = 0
    with atomic_writer(path, binary=True) as handle:
        for line in lines:
            handle.write(line)
            count += 1
    return count


def atomic_write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Replace ``path`` with ``value`` as indented UTF-8 JSON (noterag's JSON files: run.json,
    summary.json, index manifests), atomically and durably."""
    atomic_write_text(path, json.dumps(value, ensure_ascii=False, indent=2) + "\n")


class UnreadableJSON(ValueError):
    """Valid JSON text that Python's parser cannot read: nested past the recursion limit, or
    an integer of more digits than Python converts (``sys.get_int_max_str_digits``)."""


def read_json(text: str | bytes) -> Any:
    """``json.loads(text)``; a ``json.JSONDecodeError`` as it is (its callers word its position),
    any other failure an ``UnreadableJSON`` with a one-line reason: the parser's RecursionError
    and the digit limit's ValueError otherwise escape a reader's bad-line handling."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise UnreadableJSON("JSON nested too deeply to read") from None
    except ValueError as exc:
        if "digits" in str(exc):
            raise UnreadableJSON("a number of more digits than can be read") from None
        raise UnreadableJSON(str(exc).split("\n", 1)[0]) from None


def check_output_file(
    path: str | os.PathLike[str],
    *,
    option: str,
    ours: Callable[[Path], bool],
    what: str,
    force: bool = False,
    make_parent: bool = False,
) -> Path:
    """Check, before the work that produces it, that ``path`` can take an output file: not a
    directory, in a directory that exists (or is created, ``make_parent``) and where a file
    can be created, and, if it exists, a regular file (or a link, which the write replaces) that is
    empty or ``ours(path)`` (a file noterag wrote) unless ``force``. ``option`` names the command-line option in messages, ``what`` the kind of
    file ("a page", "a plot"). Raises ConfigError with one line saying what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a directory; give a file name")
    parent = path.parent
    if make_parent and not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{option} {path}: cannot create {parent}: {_reason(exc)}") from None
    if not parent.exists():
        raise ConfigError(f"{option} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is not a directory")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None and not (stat.S_ISREG(found.st_mode) or stat.S_ISLNK(found.st_mode)):
        # a device node, a FIFO, a socket: its size says nothing (0), and replacing it with a
        # regular file (as root: /dev/null) is never what an output option means, --force or not
        raise ConfigError(
            f"{option} {path} is not a regular file (a device, a FIFO or a socket); give the "
            "name of a file to write"
        )
    if path.exists() and not force and path.stat().st_size > 0 and not ours(path):
        raise ConfigError(
            f"{option} {path} exists and is not {what} noterag wrote; refusing to overwrite it "
            "(choose another name, or --force to overwrite it)"
        )
    # Permissions, a read-only or full filesystem: try what the write will do, a temporary
    # sibling (which also covers root, for whom permission bits say little).
    probe = _temporary_sibling(path)
    try:
        open(probe, "xb").close()
    except OSError as exc:
        raise ConfigError(f"{option}: cannot write {path}: {_reason(exc)}") from None
    probe.unlink(missing_ok=True)
    return path


def file_starts_with(path: Path, *markers: bytes, within: int = 4096) -> bool:
    """Whether the first ``within`` bytes of ``path`` hold every one of ``markers`` (how a
    caller recognises a file it wrote); False when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(within)
    except OSError:
        return False
    return all(marker in head for marker in markers)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
