"""``run_eval(..., cache=PATH)``: every model reply kept in a persistent SQLite cache.

The same eval again makes no model request, and a run that differs only downstream (a metric,
a setting that changes only later steps) pays only for its new prompts. It is a LangChain
cache (``langchain_core.caches.BaseCache``) set on the run's chat model, so the key is
LangChain's own: the prompt and the ``llm_string`` (the model's class, name and parameters,
temperature, max tokens, stop words, ...). The table is that of langchain-community's
``SQLiteCache`` (``full_llm_cache``: prompt, llm, idx, response as ``langchain_core.load``
JSON), written here on the standard library's sqlite3 so that no extra package is needed,
in WAL mode so that the worker processes of one run (``--workers``) and parallel shards read
and write the one file at once.

The key names the local llama.cpp server (``--model local``, a new port each run) by the GGUF
file it serves rather than its URL, and leaves out the model fields that change how a reply is
fetched, not what it says (``_TRANSPORT``: streaming, timeouts, retries). Besides letting a
rerun with another ``--timeout`` replay, leaving those out keeps the key stable: LangChain memoizes a model's serialization
(``BaseChatModel._serialized``, a ``cached_property``) and pydantic's ``model_copy`` copies the
memo, so the never-streaming copy noterag makes of a model for its internal calls
(``Deps.model_for``) has ``disable_streaming`` in its key only if it was copied before the
model's first call. Which came first depends on which question finished first, so a process
would store a reply under one key and the next run (or the other worker) look it up under the
other, and ask the endpoint again.

With sampling (temperature > 0), the cache replays the first sample it stored for a prompt:
a cached run is a replay of that one, not a new draw.

Hits are counted per question (``count_cache``), like the retries: the result rows say how
many calls and tokens came from the cache (``cache_calls``, ``cache_tokens``), the summary
adds them up against those from the endpoint. The rows' ``llm_calls`` and token counts stay
those of the method (a cached reply keeps its usage), so a cached run's rows equal the
uncached run's.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.load import dumps, loads

from noterag.base.errors import ConfigError, ModelUnavailableError
from noterag.base.redact import redact
from noterag.core.spec import copy_chat_model

# ``loads`` is marked beta; its format is what the file holds, and a reply it cannot read is
# asked again, so the warning says nothing to act on. A filter on its message alone (the
# public ``warnings`` API: the lookups run in threads, where catch_warnings would race).
warnings.filterwarnings("ignore", message=r"The function `loads` is in beta")

# How long a write waits for another process's write to end (in a thread: the event loop
# goes on), and how long opening waits before a lock held by another process is an error.
_BUSY_S = 10.0
_OPEN_BUSY_S = 2.0
# Less free space than this where the cache lives is a full disk: refused before any call.
_MIN_FREE_BYTES = 16 << 20


class CacheError(ModelUnavailableError):
    """The model cache cannot be read or written (full disk, locked by another process,
    damaged): one line naming the file. A ``ModelUnavailableError``, so that a run stops at
    once (``noterag.models.fatal_error``) instead of failing every question after paying for
    its calls."""


@dataclass
class CacheCount:
    """The calls of one question answered from the cache, and their tokens."""

    calls: int = 0
    tokens: int = 0


_COUNT: ContextVar[CacheCount | None] = ContextVar("noterag_cache_count", default=None)


@contextmanager
def count_cache() -> Iterator[CacheCount]:
    """Count the cache hits of the model calls made in this context (an asyncio task and the
    tasks and threads it starts, which copy the context)."""
    counter = CacheCount()
    token = _COUNT.set(counter)
    try:
        yield counter
    finally:
        _COUNT.reset(token)


# Model fields (LangChain's constructor kwargs) that change how a reply is fetched, not what
# it says; left out of the key (module docstring).
_TRANSPORT = frozenset(
    {"disable_streaming", "streaming", "request_timeout", "timeout", "max_retries"}
)


@lru_cache(maxsize=256)
def reply_key(llm_string: str) -> str:
    """LangChain's ``llm_string`` (the model's serialization as JSON, ``---``, the call's
    parameters) without the ``_TRANSPORT`` fields, and with the local server's URL named by
    the model file it serves; a model without either keeps LangChain's own key, and so does a
    model LangChain cannot serialize (its key is not JSON)."""
    try:
        serialized, end = json.JSONDecoder().raw_decode(llm_string)
    except ValueError:
        return redact(llm_string)
    kwargs = serialized.get("kwargs") if isinstance(serialized, dict) else None
    if not isinstance(kwargs, dict):
        return redact(llm_string)
    kept = {key: value for key, value in kwargs.items() if key not in _TRANSPORT}
    if (local := _local_endpoint()) and kept.get("openai_api_base") == local[0]:
        kept["openai_api_base"] = local[1]
    if isinstance(query := kept.get("default_query"), dict):
        # a base URL's ?query (models.spec sends it as default_query): written as the query
        # string it came from, so that redact() finds its secret parameters as in a URL
        kept["default_query"] = "?" + urlencode(sorted(query.items()))
    if kept == kwargs:
        return redact(llm_string)
    # sort_keys, as LangChain writes it (_get_llm_string); credentials in the base URL never
    # reach the file (noterag.base.redact)
    return redact(json.dumps(serialized | {"kwargs": kept}, sort_keys=True) + llm_string[end:])


def _local_endpoint() -> tuple[str, str] | None:
    """The running local server's base URL and what stands for it in a key: ``--model local``
    starts llama.cpp on a free port, another each run, so its URL would make every run's keys
    new; the GGUF file it serves (name and size) is what decides its replies."""
    from noterag.models.local_server import find_local_gguf, local_server_url

    url = local_server_url()
    if url is None:
        return None
    gguf = find_local_gguf()
    return url, f"local:{gguf.name}:{gguf.stat().st_size}"


def _tokens(generations: Sequence[Any]) -> int:
    total = 0
    for generation in generations:
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None) or {}
        total += int(usage.get("input_tokens") or 0) + int(usage.get("output_tokens") or 0)
    return total


class SQLiteLLMCache(BaseCache):
    """LangChain's cache interface over one SQLite file, safe across threads and processes.

    Opening it checks what would otherwise fail every question after its calls were paid
    for: the file is SQLite and undamaged (``PRAGMA quick_check``), no other process holds a
    lock that keeps writes out, and the disk has room. A fault found later (a full disk, a
    lock held past ``_BUSY_S``, a damaged page) is a ``CacheError`` naming the file, which
    stops the run. The async methods run in a thread, so a locked file never stalls the
    event loop."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot open the model cache {self.path}: {_reason(exc)}") from None
        with self._faults("cannot open"):
            self._check()

    @contextmanager
    def _faults(self, doing: str) -> Iterator[None]:
        """Every sqlite3 or OS error of the block as one ``CacheError`` naming the file."""
        try:
            yield
        except (OSError, sqlite3.Error) as exc:
            raise CacheError(f"{doing} the model cache {self.path}: {_reason(exc)}") from None

    def _check(self) -> None:
        # The first connection (this thread's) waits less for a lock while opening; then as
        # long as any other.
        connection = self._connection(busy_s=_OPEN_BUSY_S)
        try:
            self._probe(connection)
        finally:
            with suppress(sqlite3.Error):  # the probe's own error is the one to report
                connection.execute(f"PRAGMA busy_timeout = {int(_BUSY_S * 1000)}")

    def _probe(self, connection: sqlite3.Connection) -> None:
        problems = [row[0] for row in connection.execute("PRAGMA quick_check").fetchall()]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError(f"damaged ({'; '.join(map(str, problems[:3]))})")
        try:  # a write lock taken and given back: no other process keeps writes out
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise sqlite3.OperationalError(
                    "it is locked by another process (another tool holding it open in a write)"
                ) from None
            raise
        connection.execute("ROLLBACK")
        free = shutil.disk_usage(self.path.parent).free
        if free < _MIN_FREE_BYTES:
            raise OSError(f"the disk holding it is full ({free:,} bytes free)")

    def _connection(self, busy_s: float = _BUSY_S) -> sqlite3.Connection:
        # One connection per thread and per process: a sqlite3 connection must not cross a
        # fork, and the default executor's threads call the sync methods.
        pid = os.getpid()
        connection = getattr(self._local, "connection", None)
        if connection is None or self._local.pid != pid:
            connection = sqlite3.connect(self.path, timeout=busy_s, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a committed reply survives a killed process; a power cut may lose
            # the last ones, which a cache can afford (they are asked again).
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(
                "CREATE TABLE IF NOT EXISTS full_llm_cache (prompt TEXT NOT NULL, llm TEXT NOT "
                "NULL, idx INTEGER NOT NULL, response TEXT, PRIMARY KEY (prompt, llm, idx))"
            )
            self._local.connection, self._local.pid = connection, pid
        return connection

    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        with self._faults("cannot read"):
            rows = (
                self._connection()
                .execute(
                    "SELECT response FROM full_llm_cache WHERE prompt = ? AND llm = ? ORDER BY idx",
                    (prompt, reply_key(llm_string)),
                )
                .fetchall()
            )
        if not rows:
            return None
        try:
            generations = [loads(row[0], allowed_objects="core") for row in rows]
        except Exception:  # noqa: BLE001 - written by another version: ask the model again
            return None
        counter = _COUNT.get()
        if counter is not None:
            counter.calls += 1
            counter.tokens += _tokens(generations)
        return generations

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        llm = reply_key(llm_string)
        values = [(prompt, llm, i, dumps(gen)) for i, gen in enumerate(return_val)]
        with self._faults("cannot write"):
            connection = self._connection()
            with connection:  # one transaction: a reader sees all generations or none
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(
                    "INSERT OR REPLACE INTO full_llm_cache (prompt, llm, idx, response) "
                    "VALUES (?, ?, ?, ?)",
                    values,
                )

    def clear(self, **kwargs: Any) -> None:
        with self._faults("cannot write"):
            self._connection().execute("DELETE FROM full_llm_cache")

    # In a thread: a write waits (up to _BUSY_S) while another process writes, which must not
    # stall every other question of the event loop; to_thread copies the context, so the hits
    # are still counted for the question that asked.
    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return await asyncio.to_thread(self.lookup, prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        await asyncio.to_thread(self.update, prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.clear)


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__


def with_cache(model: Any, cache: BaseCache) -> Any:
    """A copy of the chat model that reads and writes ``cache`` (the caller's object is left
    as it was)."""
    if not hasattr(model, "cache"):
        raise ConfigError(f"--cache needs a LangChain chat model, not {type(model).__name__}")
    return copy_chat_model(model, cache=cache)
