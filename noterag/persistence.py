"""Durable threads: the LangGraph checkpointer behind ``noterag ask`` (and any app that wants
noterag's default).

``open_checkpointer(where)`` is a context manager giving LangGraph's saver for ``where``:

* a file path: SQLite (langgraph-checkpoint-sqlite's ``SqliteSaver``), the default, at
  ``$NOTERAG_CHECKPOINT`` or else ``$XDG_STATE_HOME/noterag/threads.sqlite``
  (``~/.local/state/noterag/threads.sqlite``): one process at a time, nothing to run;
* a ``postgres://`` / ``postgresql://`` URL: Postgres (langgraph-checkpoint-postgres's
  ``PostgresSaver``, the ``postgres`` extra), for several processes sharing threads;
* ``"none"``: no checkpointer (a run cannot be resumed).

``server_checkpointer()`` is the same choice for ``langgraph dev`` (langgraph.json's
``checkpointer``, LangGraph's custom-checkpointer hook): ``$NOTERAG_CHECKPOINT`` (a file, a
Postgres URL, or ``none`` for the server's own memory), else ``.langgraph_api/threads.sqlite`` in
the server's directory, beside the server's own list of threads and runs (so ``rm -rf
.langgraph_api`` clears both).

A run checkpointed after each step (``durability="sync"``) that is killed resumes from its last
finished step: LangGraph replays no finished node (docs/embedding.md, "Persistence").
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from noterag.errors import ConfigError

NO_CHECKPOINT = "none"
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
# langgraph dev keeps its threads and runs in .langgraph_api/ of its working directory
SERVER_DEFAULT = str(Path(".langgraph_api") / "threads.sqlite")


def default_location() -> str:
    """``$NOTERAG_CHECKPOINT``, else the SQLite file under the XDG state directory."""
    given = os.environ.get("NOTERAG_CHECKPOINT", "").strip()
    if given:
        return given
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "noterag" / "threads.sqlite")


def describe(where: str) -> str:
    """Where threads are kept, for a progress line (a Postgres URL without its password)."""
    if where.startswith(POSTGRES_SCHEMES):
        from urllib.parse import urlsplit

        url = urlsplit(where)
        host = url.hostname or ""
        return f"postgres://{host}{':' + str(url.port) if url.port else ''}{url.path}"
    return where


@contextmanager
def open_checkpointer(where: str | None = None) -> Iterator[Any]:
    """LangGraph's checkpointer for ``where`` (None: ``default_location()``), set up and closed
    with the block; None for ``"none"``."""
    where = (where if where is not None else default_location()).strip()
    if not where:
        raise ConfigError(
            "the checkpoint location is empty (a SQLite file, a postgres:// URL or none)"
        )
    if where.lower() == NO_CHECKPOINT:
        yield None
        return
    if where.startswith(POSTGRES_SCHEMES):
        with _postgres(where) as saver:
            yield saver
        return
    with _sqlite(Path(where).expanduser()) as saver:
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
        conn.execute("PRAGMA journal_mode=WAL")  # a killed writer leaves the file readable
    except (OSError, sqlite3.Error) as error:
        raise ConfigError(f"cannot open the checkpoint file {path}: {error}") from None
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        yield saver
    finally:
        conn.close()


NO_POSTGRES = (
    "Postgres threads need the postgres extra: pip install 'noterag[postgres]' "
    "(langgraph-checkpoint-postgres, psycopg)"
)


def _unreachable(url: str, error: BaseException) -> ConfigError:
    """The server's own words, on one line, and the URL without its password."""
    return ConfigError(f"cannot connect to {describe(url)}: {' '.join(str(error).split())[:300]}")


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
        saver.setup()
        yield saver
    finally:
        manager.__exit__(None, None, None)


@asynccontextmanager
async def server_checkpointer() -> AsyncIterator[Any]:
    """The server's saver (langgraph.json: ``"checkpointer": {"backend": "custom", "path":
    "noterag.persistence.server_checkpointer"}``): LangGraph's async SQLite or Postgres saver
    for ``$NOTERAG_CHECKPOINT``, else for ``SERVER_DEFAULT``. The server enters it once per
    event loop and closes it on shutdown."""
    where = os.environ.get("NOTERAG_CHECKPOINT", "").strip() or SERVER_DEFAULT
    if where.lower() == NO_CHECKPOINT:
        from langgraph.checkpoint.memory import InMemorySaver

        yield InMemorySaver()
    elif where.startswith(POSTGRES_SCHEMES):
        async with _apostgres(where) as saver:
            yield saver
    else:
        async with _asqlite(_sqlite_file(where)) as saver:
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
        await saver.setup()
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
