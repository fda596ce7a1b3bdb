"""The method registry and what every method's ``build`` needs: models, retriever, prompts."""

from __future__ import annotations

import asyncio
import importlib
import os
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from langchain_core.retrievers import BaseRetriever

from noterag.errors import ConfigError
from noterag.nodes.step import Deps
from noterag.profiles import is_dense

# method name -> module under noterag.graphs
GRAPH_MODULES = {
    "adaptive-note": "adaptive_note",
    "deepnote": "deepnote",
    "amber": "amber",
    "resp": "resp",
    "no-retrieval": "no_retrieval",
    "vanilla": "vanilla",
}
METHODS = tuple(GRAPH_MODULES)


def build_graph(
    method: str, *, model: Any = None, retriever: Any = None, **role_models: Any
) -> Any:
    """A compiled LangGraph graph running ``method``.

    model: a LangChain chat model, a spec ("openai:<name>", "local") or None (NOTERAG_MODEL,
    else "local"). retriever: a BaseRetriever, a spec ("bm25:<index dir>") or None
    (NOTERAG_INDEX, else the bundled sample corpus). ``<role>_model=`` gives one role its own
    model, e.g. ``answer_model=`` for the note methods, ``filter_model=`` for Amber's chunk
    filter, ``reasoner_model=`` / ``summarizer_model=`` / ``generator_model=`` for ReSP (each
    method module lists its ROLES).
    """
    return graph_module(method).build(model=model, retriever=retriever, **role_models)


def context_schema(method: str) -> type:
    """The method's context dataclass (its settings, their defaults and descriptions)."""
    return graph_module(method).CONTEXT


def graph_module(method: str) -> ModuleType:
    try:
        return importlib.import_module(f"noterag.graphs.{GRAPH_MODULES[method]}")
    except KeyError:
        raise ConfigError(
            f"unknown method {method!r}; choose one of {', '.join(METHODS)}"
        ) from None


def method_deps(
    method: str,
    prompts: Mapping[str, Any],
    context_schema: type,
    roles: tuple[str, ...],
    model: Any,
    retriever: Any,
    role_models: Mapping[str, Any],
) -> Deps:
    """Resolve a method's models (one per role, defaulting to ``model``) and retriever;
    ``prompts`` maps each profile the method has to its prompt set."""
    from noterag.models import load_chat_model

    known = {f"{role}_model": role for role in roles}
    unknown = sorted(set(role_models) - known.keys())
    if unknown:
        raise ConfigError(
            f"{method} has no model role {', '.join(unknown)}; roles: {', '.join(sorted(known))}"
        )
    models = {"default": load_chat_model(model)}
    models |= {known[k]: load_chat_model(v) for k, v in role_models.items() if v is not None}
    retriever = resolve_retriever(retriever)
    return Deps(
        method=method,
        models=models,
        retriever=retriever,
        prompts=prompts,
        context_schema=context_schema,
        dense=is_dense(retriever),
    )


def resolve_retriever(retriever: Any) -> Any:
    if isinstance(retriever, BaseRetriever):
        return retriever
    from noterag.retrievers import load_retriever

    if retriever is None:
        index = os.environ.get("NOTERAG_INDEX")
        if index:
            return load_retriever(index)
        from noterag.sample import sample_index

        return load_retriever(f"bm25:{sample_index()}")
    return load_retriever(retriever)


def lazy_graph(build: Callable[[], Any], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that builds the module's ``graph`` from the environment on first
    use rather than at import (building may start the local model), and an async ``make_graph``
    factory for langgraph.json: langgraph-api reads ``module.__dict__`` (so it never calls a
    module ``__getattr__``) and calls factories on its event loop, where starting the local
    model would block."""
    lock = threading.Lock()

    def __getattr__(name: str) -> Any:
        if name != "graph":
            raise AttributeError(name)
        with lock:
            if "graph" not in namespace:
                namespace["graph"] = build()
        return namespace["graph"]

    async def make_graph() -> Any:
        if "graph" in namespace:
            return namespace["graph"]
        return await asyncio.to_thread(__getattr__, "graph")

    namespace["make_graph"] = make_graph
    return __getattr__
