"""One writer per run directory: ``eval``, ``merge`` (and anything else that writes a run)
hold ``RUN_DIR/.noterag.lock`` while they write.

The lock is the operating system's (``fcntl.flock`` on that file), so it dies with its holder: a
process killed with SIGKILL frees it, and the next command resumes as usual; no stale lock is
ever left to remove by hand. A second writer is refused at once (no waiting) with one line
naming the holder (pid, host, command and since when), which the holder writes into the file
once it has the lock.

What the file holds is only that: the pid, the host, the program and its subcommand
(``noterag eval``, never the rest of the command line, where a ``--model`` URL may carry a
password or an ``api_key``) and the start time; and the holder empties it before it lets go,
so a finished run leaves an empty file (a file an older noterag left with a whole command
line in it is emptied by the next run that takes the lock). The file is opened without
following a symbolic link (``noterag.base.files.open_no_follow``): a link planted at
``.noterag.lock`` is refused, never truncated through. ``--force`` is no exception: the lock is taken before anything is
removed, so a forced start never pulls the results file from under a live run.

The file stays when the lock is released: removing it would let a waiting process lock an
unlinked file while a third creates a new one, two holders at once.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from noterag.base.errors import NoteragError
from noterag.base.files import LinkRefusedError, open_no_follow
from noterag.base.redact import redact

LOCK_FILE = ".noterag.lock"


class RunLockedError(NoteragError):
    """Another process is writing the run directory."""


_SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]{0,30}")


def command_name(argv: list[str] | None = None) -> str:
    """The program and its subcommand, ``noterag eval``: what names a holder to a user, and
    nothing of the command line's values (a model URL may carry credentials)."""
    argv = sys.argv if argv is None else argv
    program = Path(argv[0]).name if argv and argv[0] else "python"
    if program in ("__main__.py", "-m", "-c"):
        program = "noterag"
    words = [program]
    if len(argv) > 1 and _SUBCOMMAND.fullmatch(argv[1]):
        words.append(argv[1])
    return " ".join(words)


def _holder_line() -> bytes:
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command_name(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    return (json.dumps(holder, ensure_ascii=False) + "\n").encode()


def _describe_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 65536, 0) or b"{}")
    except (OSError, ValueError):
        holder = {}
    if not isinstance(holder, dict) or "pid" not in holder:
        return "another process (it has not said which yet)"
    # what the file says, short and redacted: a file an older noterag wrote holds a whole
    # command line (and anyone who can write the directory can write the file)
    fields = {
        key: _clip(redact(str(holder.get(key, "?")))) for key in ("pid", "host", "command", "since")
    }
    return f"pid {fields['pid']} on {fields['host']} ({fields['command']}), since {fields['since']}"


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def run_lock(run_dir: str | os.PathLike[str], what: str = "run") -> Iterator[None]:
    """Hold ``run_dir``'s lock for the block (``what`` names the directory in the message);
    ``RunLockedError`` at once when another process holds it. The directory is created if
    missing, and removed again if the block fails having left nothing but the lock in it (a
    typo in a command leaves no directory behind)."""
    run_dir = Path(run_dir)
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = open_no_follow(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except LinkRefusedError as exc:
        raise RunLockedError(f"cannot lock {run_dir}: {exc}") from None
    except OSError as exc:
        raise RunLockedError(f"cannot lock {run_dir}: {exc.strerror or exc}") from None
    ok = held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(
                f"{run_dir} is being written by {_describe_holder(fd)}: one {what} writes a "
                "run directory at a time; wait for it to finish (or stop it), or choose another "
                "--out"
            ) from None
        held = True
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_line(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its holder goes unnamed
        yield
        ok = True
    finally:
        if held:
            try:
                os.ftruncate(fd, 0)  # the holder's line goes with the holder: nothing stale
            except OSError:
                pass
        os.close(fd)  # releases the lock
        if not ok and created:
            _remove_if_only_lock(run_dir)


def _remove_if_only_lock(run_dir: Path) -> None:
    try:
        if [p.name for p in run_dir.iterdir()] == [LOCK_FILE]:
            (run_dir / LOCK_FILE).unlink()
            run_dir.rmdir()
    except OSError:
        pass  # another process got in meanwhile: its directory now
