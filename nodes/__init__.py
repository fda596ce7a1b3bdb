"""The steps of the methods, shared across graphs (see ``noterag.nodes.step`` for how a step is
written)."""
