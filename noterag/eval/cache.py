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

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from langchain_core._api.beta_decorator import suppress_langchain_beta_warning
from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.load import dumps, loads

from noterag.errors import ConfigError
from noterag.spec import copy_chat_model


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
        return llm_string
    kwargs = serialized.get("kwargs") if isinstance(serialized, dict) else None
    if not isinstance(kwargs, dict):
        return llm_string
    kept = {key: value for key, value in kwargs.items() if key not in _TRANSPORT}
    if (local := _local_endpoint()) and kept.get("openai_api_base") == local[0]:
        kept["openai_api_base"] = local[1]
    if kept == kwargs:
        return llm_string
    # sort_keys, as LangChain writes it (_get_llm_string)
    return json.dumps(serialized | {"kwargs": kept}, sort_keys=True) + llm_string[end:]


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
    """LangChain's cache interface over one SQLite file, safe across threads and processes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._connection()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open the model cache {self.path}: {exc}") from None

    def _connection(self) -> sqlite3.Connection:
        # One connection per thread and per process: a sqlite3 connection must not cross a
        # fork, and the default executor's threads call the sync methods.
        pid = os.getpid()
        connection = getattr(self._local, "connection", None)
        if connection is None or self._local.pid != pid:
            connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
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
            # loads is marked beta; its format is what the file holds, and a reply it cannot
            # read is asked again, so the warning says nothing to act on.
            with suppress_langchain_beta_warning():
                generations = [loads(row[0], allowed_objects="core") for row in rows]
        except Exception:  # noqa: BLE001 - written by another version: ask the model again
            return None
        counter = _COUNT.get()
        if counter is not None:
            counter.calls += 1
            counter.tokens += _tokens(generations)
        return generations

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        connection, llm = self._connection(), reply_key(llm_string)
        with connection:  # one transaction: a reader sees all generations or none
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(
                "INSERT OR REPLACE INTO full_llm_cache (prompt, llm, idx, response) "
                "VALUES (?, ?, ?, ?)",
                [(prompt, llm, i, dumps(gen)) for i, gen in enumerate(return_val)],
            )

    def clear(self, **kwargs: Any) -> None:
        self._connection().execute("DELETE FROM full_llm_cache")

    # The sync methods directly: a lookup is a fraction of a millisecond, less than handing it
    # to a thread (and the counter's context stays the task's).
    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return self.lookup(prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        self.update(prompt, llm_string, return_val)

    async def aclear(self, **kwargs: Any) -> None:
        self.clear()


def with_cache(model: Any, cache: BaseCache) -> Any:
    """A copy of the chat model that reads and writes ``cache`` (the caller's object is left
    as it was)."""
    if not hasattr(model, "cache"):
        raise ConfigError(f"--cache needs a LangChain chat model, not {type(model).__name__}")
    return copy_chat_model(model, cache=cache)
