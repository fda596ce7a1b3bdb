"""The graphs in LCEL chains: a Runnable from a question to the answer's text.

A compiled graph takes ``{"question": ...}`` and returns the run's state (a dict), so
``graph | StrOutputParser()`` has nothing to parse. ``answer_only(graph)`` is the graph between
two steps: a question string (or the graph's own input dict) in, the answer string out::

    chain = noterag.answer_only(graph) | StrOutputParser()
    chain.invoke("In which year was the architect of the Velmora Bridge born?")

The config (a thread's ``{"configurable": {"thread_id": ...}}``, callbacks) passes through to
the graph as through any chain; a run's settings (LangGraph's ``context=``, which a chain does not
pass on) are bound with ``answer_only(graph, context={"max_steps": 2})``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import Runnable, RunnableLambda


def _as_input(question: Any) -> Any:
    # a string is the question; a dict is the graph's own input ({"question"} or {"messages"})
    return {"question": question} if isinstance(question, str) else question


def _answer(state: Any) -> str:
    return (state or {}).get("answer") or ""


def answer_only(graph: Runnable, *, context: Any = None) -> Runnable:
    """``graph`` as a Runnable from a question (a string or the graph's input dict) to the
    answer's text (empty when the run wrote none, e.g. a run paused for a human review).
    ``context``: the run's settings, bound to every call."""
    name = getattr(graph, "name", None) or "graph"
    bound = graph if context is None else graph.bind(context=context)
    return (
        RunnableLambda(_as_input, name="question") | bound | RunnableLambda(_answer, name="answer")
    ).with_config(run_name=f"{name}.answer_only")
