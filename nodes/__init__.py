"""The steps of the methods, shared across graphs (see ``noterag.core.step`` for how a step is
written)."""
