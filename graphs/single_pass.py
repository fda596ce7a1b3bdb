"""The baselines' shape: the question step, a fixed sequence of steps once each, the answer.

    question -> [retrieve] -> stop_check (single pass) -> answer
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.graph import END, StateGraph

from noterag.nodes.answer import answer
from noterag.nodes.step import node
from noterag.nodes.stops import single_pass, stop_check
from noterag.spec import Deps


def single_pass_trace(state: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline's one trace entry: what it searched and read, and its one model call."""
    searched = state.get("passages") is not None
    return {
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]] if searched else [],
                "new_passage_ids": [p["id"] for p in state.get("passages") or []],
                "llm_calls": 1,
            }
        ]
    }


def wiring(steps: Sequence[Callable[..., Any]]) -> Callable[[StateGraph, Deps], None]:
    """A ``MethodSpec.wire`` running ``steps`` once each, in order, then the answer."""

    def wire(graph: StateGraph, deps: Deps) -> None:
        previous = "question"
        for step in steps:
            graph.add_node(step.__name__, node(step, deps))
            graph.add_edge(previous, step.__name__)
            previous = step.__name__
        graph.add_node(
            "stop_check",
            stop_check(single_pass, deps, go_on="answer", record=single_pass_trace),
            destinations=("answer",),
        )
        graph.add_edge(previous, "stop_check")
        graph.add_node("answer", node(answer, deps))
        graph.add_edge("answer", END)

    return wire
