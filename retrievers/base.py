"""What every noterag retriever shares: ``k`` per call, a ``search`` that does the work, the
LangChain entry points over it (async in a thread; an index directory's quick searches on the
event loop), and the Document shape."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from .corpus import Passage


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    return k


def to_document(passage: Passage, score: float) -> Document:
    return Document(
        page_content=passage["text"],
        id=passage["id"],
        metadata={"id": passage["id"], "title": passage["title"], "score": score},
    )


# A search of an index directory that has been quicker than this runs on the event loop. Handed
# to a thread, its question waits for the loop to take the result back, behind the other
# questions' work: under an eval's load (bench/throughput.py, 16 questions per process) 0.3 ms
# median and 1.3 ms mean, where a BM25 search of the sample index takes 0.2 ms. A slow search
# (a large index, a dense encoder) stays in a thread, where it does not hold up the others.
# Only an index in this process: a network search (Elasticsearch) can stall for its timeout.
QUICK_SEARCH_S = 0.001


class SearchPace:
    """How long a retriever's searches take: a moving average of the last ones, unknown (so
    in a thread) until the first has run."""

    def __init__(self) -> None:
        self.mean_s: float | None = None

    @property
    def quick(self) -> bool:
        return self.mean_s is not None and self.mean_s < QUICK_SEARCH_S

    def add(self, seconds: float) -> None:
        self.mean_s = seconds if self.mean_s is None else 0.8 * self.mean_s + 0.2 * seconds

    def timed(self, search: Any, query: str, k: int | None) -> list[Document]:
        start = time.perf_counter()
        try:
            return search(query, k)
        finally:
            self.add(time.perf_counter() - start)


class SearchMixin:
    """For a ``BaseRetriever`` with a field ``k`` and a method ``search(query, k)``: ``k`` as an
    invoke kwarg, ``search_many``, and the async path in a thread (the engines are synchronous
    and release the GIL, so other graph branches go on meanwhile) unless ``_quick()`` says the
    search may run on the event loop."""

    k: int

    def search(self, query: str, k: int | None = None) -> list[Document]:
        raise NotImplementedError

    def _resolve_k(self, k: int | None) -> int:
        return self.k if k is None else check_k(k)

    def search_many(self, queries: Sequence[str], k: int | None = None) -> list[list[Document]]:
        """``search`` for each query, in order, without per-query callback overhead."""
        return [self.search(query, k) for query in queries]

    def _search(self, query: str, k: int | None) -> list[Document]:
        """``search`` as the LangChain entry points call it."""
        return self.search(query, k)

    def _quick(self) -> bool:
        """Whether the next search may run on the event loop."""
        return False

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self._search(query, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        if self._quick():
            return self._search(query, k)
        return await asyncio.to_thread(self._search, query, k)


class IndexDirRetriever(SearchMixin, BaseRetriever):
    """A retriever over a noterag index directory (``index_dir``, a str or a path), opened on
    first use; ``k`` passages by default. Searched in this process: under ``ainvoke``, on the
    event loop once its searches have proved quicker than ``QUICK_SEARCH_S`` (``_pace``), else
    in a thread."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index_dir: str
    k: int = Field(default=5, ge=1)

    _pace: SearchPace = PrivateAttr(default_factory=SearchPace)

    def _search(self, query: str, k: int | None) -> list[Document]:
        return self._pace.timed(self.search, query, k)

    def _quick(self) -> bool:
        return self._pace.quick

    @field_validator("index_dir", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value
