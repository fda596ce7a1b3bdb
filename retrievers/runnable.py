"""Any Runnable from a query to documents, as a retriever: ``RunnableLambda(search)``,
``retriever | RunnableLambda(rerank)``, a plain function.

The steps ask a retriever for the top ``k`` passages (``retriever.invoke(query, k=k)``); a
Runnable other than a ``BaseRetriever`` takes only the query, so the adapter calls it with the
query alone and keeps the first ``k`` documents it returns. Its run is a child of the
retriever's run, so a trace shows both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import ConfigDict

from noterag.base.errors import ConfigError


class RunnableRetriever(BaseRetriever):
    """A retriever whose documents are ``runnable``'s output for the query (its first ``k``)."""

    runnable: Runnable[str, Sequence[Document]]

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @classmethod
    def of(cls, retriever: Any) -> RunnableRetriever:
        """The adapter for a Runnable or a function of the query."""
        runnable = retriever if isinstance(retriever, Runnable) else RunnableLambda(retriever)
        return cls(runnable=runnable)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        docs = self.runnable.invoke(query, config={"callbacks": run_manager.get_child()})
        return _documents(docs, k)

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        docs = await self.runnable.ainvoke(query, config={"callbacks": run_manager.get_child()})
        return _documents(docs, k)


def _documents(docs: Any, k: int | None) -> list[Document]:
    if isinstance(docs, Document):
        docs = [docs]
    if not isinstance(docs, Sequence) or not all(isinstance(d, Document) for d in docs):
        raise ConfigError(
            f"a retriever Runnable must return a list of Documents; got {type(docs).__name__}"
        )
    return list(docs[:k] if k is not None else docs)
