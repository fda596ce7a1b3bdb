"""What every noterag retriever shares: ``k`` per call, a ``search`` that does the work, the
LangChain entry points over it (async in a thread), and the Document shape."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator

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


class SearchMixin:
    """For a ``BaseRetriever`` with a field ``k`` and a method ``search(query, k)``: ``k`` as an
    invoke kwarg, ``search_many``, and the async path in a thread (the engines are synchronous
    and release the GIL, so other graph branches go on meanwhile)."""

    k: int

    def search(self, query: str, k: int | None = None) -> list[Document]:
        raise NotImplementedError

    def _resolve_k(self, k: int | None) -> int:
        return self.k if k is None else check_k(k)

    def search_many(self, queries: Sequence[str], k: int | None = None) -> list[list[Document]]:
        """``search`` for each query, in order, without per-query callback overhead."""
        return [self.search(query, k) for query in queries]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        return self.search(query, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        return await asyncio.to_thread(self.search, query, k)


class IndexDirRetriever(SearchMixin, BaseRetriever):
    """A retriever over a noterag index directory (``index_dir``, a str or a path), opened on
    first use; ``k`` passages by default."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index_dir: str
    k: int = Field(default=5, ge=1)

    @field_validator("index_dir", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value
