"""The method registry: every registered method's declaration, by name (``METHODS``), found by
discovery (a module of ``noterag.graphs`` with a ``SPEC`` is a method) or added by
``register``."""

from noterag.registry.methods import (
    METHODS,
    Registry,
    build_graph,
    context_schema,
    note_methods,
    register,
)

__all__ = ["METHODS", "Registry", "build_graph", "context_schema", "note_methods", "register"]
