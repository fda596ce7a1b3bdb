"""Hybrid retrieval: reciprocal rank fusion of several retrievers (typically BM25 + dense).

Spec: ``"hybrid:<bm25 dir>,<dense dir>"``; each comma-separated part is itself any retriever
spec (a bare index directory is recognised by its manifest), so ``"hybrid:bm25:a,dense:b"``
and ``"hybrid:a,es:http://host:9200/idx"`` work too.

Reciprocal rank fusion (Cormack et al., 2009): a passage's score is the sum over retrievers of
``1 / (rrf_k + rank)``, ranks counted from 1, with ``rrf_k = 60``. Each retriever is asked for
``fetch_factor * k`` candidates so a passage ranked just below ``k`` by both can still win.
Only ranks are used, so BM25 and cosine scores, on different scales, need no calibration.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from pydantic import Field, field_validator

from .base import SearchMixin
from .calls import asearch


class HybridRetriever(SearchMixin, BaseRetriever):
    """Reciprocal rank fusion of ``retrievers``' results; ``k`` per call like the others.

    Each result keeps the metadata of its first retriever that found it, with ``score`` set
    to the fused score and ``ranks`` mapping each retriever (by position, ``"0"``, ``"1"``, ...)
    that found it to its 1-based rank there.
    """

    retrievers: list[BaseRetriever]
    k: int = Field(default=5, ge=1)
    rrf_k: int = Field(default=60, ge=0)
    fetch_factor: int = Field(default=3, ge=1)

    @field_validator("retrievers")
    @classmethod
    def _at_least_two(cls, value: list[BaseRetriever]) -> list[BaseRetriever]:
        if len(value) < 2:
            raise ValueError("a hybrid retriever fuses at least two retrievers")
        return value

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        k = self._resolve_k(k)
        if k == 0:
            return []
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        results = [
            retriever.invoke(query, config, k=k * self.fetch_factor)
            for retriever in self.retrievers
        ]
        return self.fuse(results, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        k = self._resolve_k(k)
        if k == 0:
            return []
        config: RunnableConfig = {"callbacks": run_manager.get_child()}
        # Concurrent: the retrievers run in their own threads or on the network.
        results = await asyncio.gather(
            *(
                asearch(retriever, query, k * self.fetch_factor, config)
                for retriever in self.retrievers
            )
        )
        return self.fuse(list(results), k)

    def fuse(self, results: list[list[Document]], k: int) -> list[Document]:
        """The top ``k`` of ``results`` (one ranked list per retriever) by reciprocal rank."""
        fused: dict[str, dict[str, Any]] = {}
        for source, documents in enumerate(results):
            for rank, document in enumerate(documents, start=1):
                key = _key(document)
                entry = fused.get(key)
                if entry is None:
                    entry = fused[key] = {"document": document, "score": 0.0, "ranks": {}}
                if str(source) in entry["ranks"]:
                    continue  # a retriever that returns a passage twice counts it once
                entry["ranks"][str(source)] = rank
                entry["score"] += 1.0 / (self.rrf_k + rank)
        # Best fused score first; ties go to the better single rank, then (the sort is
        # stable) to the passage met first, reading the retrievers' lists in order.
        ordered = sorted(fused.values(), key=lambda e: (-e["score"], min(e["ranks"].values())))
        out = []
        for entry in ordered[:k]:
            best: Document = entry["document"]
            metadata = {**best.metadata, "score": entry["score"], "ranks": entry["ranks"]}
            out.append(best.model_copy(update={"metadata": metadata}))
        return out


def _key(document: Document) -> str:
    if document.id is not None:
        return str(document.id)
    if "id" in document.metadata:
        return str(document.metadata["id"])
    return document.page_content
