"""The steps of the methods, shared across graphs (see ``noterag.step`` for how a step is
written)."""
