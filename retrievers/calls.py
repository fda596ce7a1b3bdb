"""One search of any LangChain retriever, with the call's own ``k``, under asyncio.

LangChain hands a call's extra arguments (``k``) to a retriever's synchronous method, and to its
asynchronous one only when the class writes one: the default asynchronous path runs the
synchronous method in a thread without them, and fails when that method takes them. No public
API says which kind a retriever is, so the retrievers whose asynchronous path takes ``k`` say so
by their class (noterag's own, ``SearchMixin`` and ``RunnableRetriever``, and LangChain's
``VectorStoreRetriever``, whose asynchronous path passes its arguments to the store's search);
any other retriever is searched through its synchronous path in a thread, as LangChain's
default would.
"""

from __future__ import annotations

from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStoreRetriever

from .base import SearchMixin
from .runnable import RunnableRetriever

# the retrievers whose ``ainvoke`` takes ``k``
ASYNC_K = (SearchMixin, RunnableRetriever, VectorStoreRetriever)


async def asearch(
    retriever: BaseRetriever, query: str, k: int, config: RunnableConfig | None = None
) -> list[Document]:
    """``retriever``'s top ``k`` for ``query``, without blocking the event loop."""
    if isinstance(retriever, ASYNC_K):
        return await retriever.ainvoke(query, config, k=k)
    found: Any = await run_in_executor(config, retriever.invoke, query, config, k=k)
    return list(found)
