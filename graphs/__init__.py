"""One module per method: wiring only (see ``noterag.registry.methods.METHODS``)."""
