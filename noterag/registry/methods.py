"""The method registry: every method's declaration (``MethodSpec``), by name.

The built-in methods' graph modules are imported on first use (importing one builds nothing);
``register`` adds another method, e.g. from a test module or a user's package, and everything
generic (``build_graph``, the CLI, eval rows, the trace page, chat resets) serves it at once.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from noterag.base.errors import ConfigError
from noterag.core.progress import check_shape
from noterag.core.spec import MethodError, MethodSpec, reads_note
from noterag.graphs.assemble import build

# The four note methods first, in the order `noterag methods` lists them; then every other
# module of noterag.graphs that declares a SPEC (the baselines), by name. A new built-in method
# is its graph module: nothing here lists it.
FIRST = ("adaptive_note", "deepnote", "amber", "resp")


def builtin_modules() -> list[str]:
    """The modules of noterag.graphs that declare a method (a module-level ``SPEC``)."""
    import noterag.graphs

    names = sorted(m.name for m in pkgutil.iter_modules(noterag.graphs.__path__))
    ordered = [n for n in FIRST if n in names] + [n for n in names if n not in FIRST]
    return [n for n in ordered if hasattr(importlib.import_module(f"noterag.graphs.{n}"), "SPEC")]


class Registry(Mapping[str, MethodSpec]):
    """Method name -> declaration. Iterating gives the names, so ``", ".join(METHODS)`` and
    ``"deepnote" in METHODS`` read as before."""

    def __init__(self) -> None:
        self._specs: dict[str, MethodSpec] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            builtin = {}
            for module in builtin_modules():
                spec = importlib.import_module(f"noterag.graphs.{module}").SPEC
                builtin[spec.name] = spec
            self._specs = builtin | self._specs
            self._loaded = True

    def __getitem__(self, name: str) -> MethodSpec:
        self._load()
        try:
            return self._specs[name]
        except KeyError:
            raise ConfigError(
                f"unknown method {name!r}; choose one of {', '.join(self._specs)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(list(self._specs))

    def __len__(self) -> int:
        self._load()
        return len(self._specs)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._specs

    def register(self, spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
        """Add a method; a name already taken is refused unless ``replace``, and so is a
        declaration whose progress lines are not data (``noterag.core.progress``)."""
        try:
            check_shape(spec.progress)
        except TypeError as exc:
            raise MethodError(f"{spec.name}: {exc}") from None
        self._load()
        with self._lock:
            if spec.name in self._specs and not replace:
                raise ConfigError(f"a method named {spec.name!r} is already registered")
            self._specs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        with self._lock:
            self._specs.pop(name, None)


METHODS = Registry()


def register(spec: MethodSpec, *, replace: bool = False) -> MethodSpec:
    """Make ``spec`` a method of noterag (``noterag.METHODS``)."""
    return METHODS.register(spec, replace=replace)


def build_graph(
    method: str | MethodSpec,
    *,
    model: Any = None,
    retriever: Any = None,
    prompts: Mapping[str, Any] | None = None,
    checkpointer: Any = None,
    store: Any = None,
    cache: Any = None,
    **role_models: Any,
) -> Any:
    """A compiled LangGraph graph running ``method`` (its name, or its ``MethodSpec``).

    model: a LangChain chat model or a Runnable wrapping one (``with_retry``,
    ``with_fallbacks``, ``configurable_alternatives``), a spec ("openai:<name>", "local",
    "anthropic:<name>" through LangChain's init_chat_model) or None (NOTERAG_MODEL, else
    "local"). retriever: a BaseRetriever, any Runnable or function from a query to documents,
    a spec ("bm25:<index dir>") or None (NOTERAG_INDEX, else the bundled sample corpus).
    ``checkpointer``, ``store``, ``cache``: LangGraph's, given to ``compile`` (None: none;
    threads, interrupts and resuming need a checkpointer; docs/embedding.md). ``<role>_model=`` gives one role its own
    model, e.g. ``answer_model=`` for the note methods, ``filter_model=`` for Amber's chunk
    filter, ``reasoner_model=`` / ``summarizer_model=`` / ``generator_model=`` for ReSP (each
    method's ``SPEC.roles``). ``prompts`` replaces prompts by name for this graph, e.g.
    ``{"refine_query": "... {query} ... {note} ... {query_log}"}`` or ``{"answer.multihop": ...}``,
    leaving the verbatim files as they are.
    """
    return build(
        method if isinstance(method, MethodSpec) else METHODS[method],
        model=model,
        retriever=retriever,
        prompts=prompts,
        checkpointer=checkpointer,
        store=store,
        cache=cache,
        **role_models,
    )


def context_schema(method: str) -> type:
    """The method's context dataclass (its settings, their defaults and descriptions)."""
    return METHODS[method].context


def note_methods() -> list[str]:
    """The registered methods whose answer prompt reads a note under some profile and task:
    those a ``human_review`` of the note (``note``, ``both``) applies to."""
    return [
        name
        for name, spec in METHODS.items()
        if any(
            reads_note(prompt_set, task)
            for prompt_set in spec.prompts.values()
            for task in getattr(prompt_set, "answer", {})
        )
    ]
