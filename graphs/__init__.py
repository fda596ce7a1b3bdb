"""One module per method: wiring only (see ``noterag.methods.METHODS``)."""
