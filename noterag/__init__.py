"""noterag: note-centric adaptive retrieval-augmented generation as LangGraph graphs.

Usage::

    import noterag
    graph = noterag.build_graph("deepnote", model="openai:gpt-4o-mini", retriever="bm25:index/")
    graph.invoke({"question": "..."}, context={"max_steps": 3})
"""

from noterag.base.errors import NoteragError
from noterag.core.lcel import answer_only
from noterag.registry.methods import METHODS, build_graph

__all__ = ["METHODS", "NoteragError", "answer_only", "build_graph"]
__version__ = "0.1.0"
