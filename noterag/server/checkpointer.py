"""Durable threads: the LangGraph checkpointer behind ``noterag ask`` (and any app that wants
noterag's default).

``open_checkpointer(where)`` is a context manager giving LangGraph's saver for ``where``:

* a file path (or ``sqlite:///path``): SQLite (langgraph-checkpoint-sqlite's ``SqliteSaver``),
  the default, at ``$NOTERAG_CHECKPOINT`` or else ``$XDG_STATE_HOME/noterag/threads.sqlite``
  (``~/.local/state/noterag/threads.sqlite``): nothing to run;
* a ``postgres://`` / ``postgresql://`` URL (``postgresql+psycopg://`` too) or a libpq
  ``key=value`` string: Postgres (langgraph-checkpoint-postgres's ``PostgresSaver``, the
  ``postgres`` extra), for several machines sharing threads;
* ``"none"``: no checkpointer (a run cannot be resumed).

Any other ``scheme://`` is refused (it would otherwise become a local file named after the
URL, its password included).

``hold_thread(where, thread_id)`` keeps a thread to one run at a time: two runs on one thread
would both read its last checkpoint and write over each other, losing a turn. SQLite: an
``flock`` on a file beside the database per thread (``threads.sqlite-lock-<hash>``, holding the
holder's pid, host and start); Postgres: a session advisory lock on a hash of the thread id,
the holder named by its connection's ``application_name``. A busy thread is refused at once,
naming the holder (a waiting run would only repeat the other's question).

``server_checkpointer()`` is the same choice for ``langgraph dev`` (langgraph.json's
``checkpointer``, LangGraph's custom-checkpointer hook): ``$NOTERAG_CHECKPOINT`` (a file, a
Postgres URL, or ``none`` for the server's own memory), else ``.langgraph_api/threads.sqlite`` in
the server's directory, beside the server's own list of threads and runs (so ``rm -rf
.langgraph_api`` clears both). The server keeps one run per thread itself.

A run checkpointed after each step (``durability="sync"``) that is killed resumes from its last
finished step: LangGraph replays no finished node (docs/embedding.md, "Persistence").
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noterag.base.errors import ConfigError, NoteragError
from noterag.base.redact import redact

NO_CHECKPOINT = "none"
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
# SQLAlchemy's name for this very driver: the URL after the scheme is libpq's
_PSYCOPG_SCHEMES = ("postgres+psycopg://", "postgresql+psycopg://")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# a libpq connection string starts with one of its keywords and "="
_LIBPQ = re.compile(
    r"^\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|connect_timeout|"
    r"application_name|options|target_session_attrs|channel_binding|sslrootcert|sslcert|sslkey)"
    r"\s*=",
    re.IGNORECASE,
)
# langgraph dev keeps its threads and runs in .langgraph_api/ of its working directory
SERVER_DEFAULT = str(Path(".langgraph_api") / "threads.sqlite")
WHERE_HELP = "a SQLite file (or sqlite:///path), a postgres:// URL or none"


class ThreadBusy(NoteragError):
    """Another run holds the thread."""


@dataclass(frozen=True)
class Location:
    """Where threads are kept: ``kind`` "none", "sqlite" (``target`` a path) or "postgres"
    (``target`` a URL or libpq string psycopg connects with)."""

    kind: str
    target: str


def default_location() -> str:
    """``$NOTERAG_CHECKPOINT``, else the SQLite file under the XDG state directory."""
    given = os.environ.get("NOTERAG_CHECKPOINT", "").strip()
    if given:
        return given
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "noterag" / "threads.sqlite")


def locate(where: str | None = None) -> Location:
    """What ``where`` (None: ``default_location()``) names, checked before anything is opened
    or created: a malformed or foreign URL is one line naming it (its password redacted)."""
    where = (where if where is not None else default_location()).strip()
    if not where:
        raise ConfigError(f"the checkpoint location is empty ({WHERE_HELP})")
    try:
        where.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes on the command line (surrogateescape)
        raise ConfigError(f"the checkpoint location {_shown(where)} is not valid UTF-8") from None
    if where.lower() == NO_CHECKPOINT:
        return Location("none", "")
    scheme = _SCHEME.match(where)
    if scheme:
        name = scheme.group(1).lower()
        rest = where[scheme.end() :]
        if name in ("postgres", "postgresql"):
            return Location("postgres", _checked_url(where))
        if name in ("postgres+psycopg", "postgresql+psycopg"):
            return Location("postgres", _checked_url("postgresql://" + rest))
        if name == "sqlite":
            # SQLAlchemy's form: sqlite:///relative.db, sqlite:////absolute.db
            path = rest[1:] if rest.startswith("/") else ""
            if not path or "?" in path:
                raise ConfigError(
                    f"the checkpoint URL {_shown(where)} names no file: write sqlite:///path "
                    "(a relative path) or sqlite:////path (an absolute one)"
                )
            return Location("sqlite", path)
        raise ConfigError(
            f"the checkpoint location {_shown(where)} is a {name}:// URL, which noterag does "
            f"not keep threads in ({WHERE_HELP})"
        )
    if _LIBPQ.match(where):
        return Location("postgres", _checked_conninfo(where))
    return Location("sqlite", where)


def _shown(text: str) -> str:
    """``text`` for an error line: credentials redacted (a libpq password too), undecodable
    bytes escaped."""
    text = re.sub(r"(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", text)
    return redact(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def _checked_url(url: str) -> str:
    """``url`` once urllib can read its host and port (libpq's own error would come later,
    from psycopg, without the URL)."""
    from urllib.parse import urlsplit

    try:
        _ = urlsplit(url).port  # a malformed IPv6 host or a port out of range raise here
    except ValueError as error:
        raise ConfigError(f"the checkpoint URL {_shown(url)} is malformed: {error}") from None
    return url


def _checked_conninfo(conninfo: str) -> str:
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise ConfigError(NO_POSTGRES) from None
    import psycopg

    try:
        conninfo_to_dict(conninfo)
    except psycopg.Error as error:
        first = " ".join(str(error).split())[:200]
        raise ConfigError(
            f"the checkpoint connection string {_shown(conninfo)} is malformed: {first}"
        ) from None
    return conninfo


def describe(where: str) -> str:
    """Where threads are kept, for a progress or error line (Postgres without its password)."""
    if where.startswith(POSTGRES_SCHEMES + _PSYCOPG_SCHEMES):
        from urllib.parse import urlsplit

        try:
            url = urlsplit(where)
            host = url.hostname or ""
            port = url.port
        except ValueError:
            return _shown(where)
        return f"postgres://{host}{':' + str(port) if port else ''}{url.path}"
    if _LIBPQ.match(where):
        return f"postgres {_shown(where)}"
    return _shown(where)


@contextmanager
def open_checkpointer(where: str | None = None) -> Iterator[Any]:
    """LangGraph's checkpointer for ``where`` (None: ``default_location()``), set up and closed
    with the block; None for ``"none"``."""
    location = locate(where)
    if location.kind == "none":
        yield None
    elif location.kind == "postgres":
        with _postgres(location.target) as saver:
            yield saver
    else:
        with _sqlite(Path(location.target).expanduser()) as saver:
            yield saver


def _sqlite_file(where: str) -> Path:
    """The SQLite file at ``where``, its directory made."""
    path = Path(where).expanduser()
    if path.is_dir():
        raise ConfigError(f"the checkpoint location {path} is a directory, not a SQLite file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot open the checkpoint file {path}: {error}") from None
    return path


@contextmanager
def _sqlite(path: Path) -> Iterator[Any]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        raise ConfigError(
            "SQLite threads need langgraph-checkpoint-sqlite: pip install langgraph-checkpoint-sqlite"
        ) from None
    import sqlite3

    _sqlite_file(str(path))
    try:
        # the graph's parallel steps write from worker threads; SqliteSaver serialises them
        conn = sqlite3.connect(str(path), check_same_thread=False)
    except (OSError, sqlite3.Error) as error:
        raise ConfigError(f"cannot open the checkpoint file {path}: {error}") from None
    try:
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # a killed writer leaves the file readable
            saver = SqliteSaver(conn)
            saver.setup()
        except (OSError, sqlite3.Error) as error:
            raise ConfigError(f"cannot open the checkpoint file {path}: {error}") from None
        try:
            yield saver
        except sqlite3.Error as error:  # a checkpoint read or write of the run
            raise NoteragError(f"the checkpoint file {path}: {error}") from None
    finally:
        conn.close()


NO_POSTGRES = (
    "Postgres threads need the postgres extra: pip install 'noterag[postgres]' "
    "(langgraph-checkpoint-postgres, psycopg)"
)


def _unreachable(url: str, error: BaseException) -> ConfigError:
    """The server's own words, on one line, and the URL without its password."""
    said = redact(" ".join(str(error).split())[:300])
    return ConfigError(f"cannot connect to {describe(url)}: {said}")


@contextmanager
def _postgres(url: str) -> Iterator[Any]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        raise ConfigError(NO_POSTGRES) from None
    try:
        manager = PostgresSaver.from_conn_string(url)
        saver = manager.__enter__()
    except (psycopg.Error, OSError) as error:
        raise _unreachable(url, error) from None
    try:
        try:
            saver.setup()
        except psycopg.Error as error:
            raise _unreachable(url, error) from None
        try:
            yield saver
        except psycopg.Error as error:  # a checkpoint read or write of the run
            said = redact(" ".join(str(error).split())[:300])
            raise NoteragError(f"the checkpoint database {describe(url)}: {said}") from None
    finally:
        manager.__exit__(None, None, None)


# --------------------------------------------------------------------------- one run a thread


@contextmanager
def hold_thread(where: str | None, thread_id: str) -> Iterator[None]:
    """Hold ``thread_id`` of the threads at ``where`` for the block, or raise ``ThreadBusy``
    naming the run that holds it (nothing to hold for ``"none"``)."""
    try:
        thread_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"the thread id {_shown(thread_id)} is not valid UTF-8") from None
    location = locate(where)
    if location.kind == "sqlite":
        with _file_lock(Path(location.target).expanduser(), thread_id):
            yield
    elif location.kind == "postgres":
        with _advisory_lock(location.target, thread_id):
            yield
    else:
        yield


def _key(thread_id: str) -> bytes:
    return hashlib.sha256(thread_id.encode("utf-8")).digest()


def _holder() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}


def _busy(thread_id: str, holder: dict[str, Any] | None) -> ThreadBusy:
    if holder and holder.get("pid"):
        since = holder.get("since")
        when = (
            time.strftime(" since %Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
            if isinstance(since, int | float)
            else ""
        )
        who = f"pid {holder['pid']} on {holder.get('host') or 'an unknown host'}{when}"
    else:
        who = "another process (starting)"
    return ThreadBusy(
        f"thread {thread_id} is in use by another run ({who}): wait for it to finish, or "
        "ask on another --thread"
    )


def lock_file(database: Path, thread_id: str) -> Path:
    """The lock file of ``thread_id`` beside the SQLite ``database``."""
    return database.with_name(f"{database.name}-lock-{_key(thread_id).hex()[:24]}")


@contextmanager
def _file_lock(database: Path, thread_id: str) -> Iterator[None]:
    import fcntl

    path = lock_file(_sqlite_file(str(database)), thread_id)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as error:
            raise ConfigError(f"cannot lock thread {thread_id} at {path}: {error}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise _busy(thread_id, holder) from None
        # the last holder unlinks the file as it lets go: hold the file that is still there
        try:
            now = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            now = None
        mine = os.fstat(fd)
        if now is not None and (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder()).encode())
        yield
    finally:
        try:
            os.unlink(path)  # still held: a newcomer's open finds the new file or none
        except OSError:
            pass
        os.close(fd)


def _read_holder(fd: int) -> dict[str, Any] | None:
    try:
        text = os.pread(fd, 4096, 0)
        holder = json.loads(text)
    except (OSError, ValueError):
        return None  # empty: the holder has not written it yet
    return holder if isinstance(holder, dict) else None


@contextmanager
def _advisory_lock(conninfo: str, thread_id: str) -> Iterator[None]:
    """A session advisory lock on the thread's 64-bit hash, on a connection of its own (the
    server lets go of it when this process dies); its ``application_name`` names the holder."""
    try:
        import psycopg
    except ImportError:
        raise ConfigError(NO_POSTGRES) from None
    key = int.from_bytes(_key(thread_id)[:8], "big", signed=True)
    mine = _holder()
    name = f"noterag pid={mine['pid']} host={mine['host']}"[:63]  # Postgres keeps 63 bytes
    try:
        conn = psycopg.connect(conninfo, autocommit=True, application_name=name)
    except (psycopg.Error, OSError) as error:
        raise _unreachable(conninfo, error) from None
    try:
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            held = bool(row and row[0])
            holder = None if held else _advisory_holder(conn, key)
        except psycopg.Error as error:
            raise _unreachable(conninfo, error) from None
        if not held:
            raise _busy(thread_id, holder)
        yield  # closing the connection lets go of the lock
    finally:
        conn.close()


def _advisory_holder(conn: Any, key: int) -> dict[str, Any] | None:
    """The holder of lock ``key`` from its session's ``application_name`` (pg_locks shows a
    bigint key as classid = its high 32 bits, objid = its low ones, objsubid = 1)."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    row = conn.execute(
        "SELECT a.application_name, extract(epoch FROM a.backend_start) FROM pg_locks l "
        "JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid",
        (unsigned >> 32, unsigned & 0xFFFFFFFF),
    ).fetchone()
    if not row:
        return None
    found = re.match(r"noterag pid=(\d+) host=(.*)$", row[0] or "")
    if not found:
        return {"pid": "?", "host": "another client", "since": row[1] and float(row[1])}
    return {"pid": int(found[1]), "host": found[2], "since": row[1] and float(row[1])}


@asynccontextmanager
async def server_checkpointer() -> AsyncIterator[Any]:
    """The server's saver (langgraph.json: ``"checkpointer": {"backend": "custom", "path":
    "noterag.server.checkpointer.server_checkpointer"}``): LangGraph's async SQLite or Postgres saver
    for ``$NOTERAG_CHECKPOINT``, else for ``SERVER_DEFAULT``. The server enters it once per
    event loop and closes it on shutdown."""
    location = locate(os.environ.get("NOTERAG_CHECKPOINT", "").strip() or SERVER_DEFAULT)
    if location.kind == "none":
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif location.kind == "postgres":
        async with _apostgres(location.target) as saver:
            yield saver
    else:
        async with _asqlite(_sqlite_file(location.target)) as saver:
            yield saver


@asynccontextmanager
async def _apostgres(url: str) -> AsyncIterator[Any]:
    try:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    except ImportError:
        raise ConfigError(NO_POSTGRES) from None
    manager = AsyncPostgresSaver.from_conn_string(url)
    try:
        saver = await manager.__aenter__()
    except (psycopg.Error, OSError) as error:
        raise _unreachable(url, error) from None
    try:
        try:
            await saver.setup()
        except psycopg.Error as error:
            raise _unreachable(url, error) from None
        yield saver
    finally:
        await manager.__aexit__(None, None, None)


@asynccontextmanager
async def _asqlite(path: Path) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        # a killed server leaves the file readable and its committed steps in it
        await saver.conn.execute("PRAGMA journal_mode=WAL")
        await saver.setup()
        yield saver
