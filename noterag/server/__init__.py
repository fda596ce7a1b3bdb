"""The LangGraph server's side of noterag (langgraph.json names these): the HTTP middleware and
request bounds (``http``, ``bounds``), the operator's key and auth (``key``, ``auth``), and the
checkpointer with its thread locks (``checkpointer``, also used by ``noterag ask --thread``)."""
