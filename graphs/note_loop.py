"""The note-centric loop that Adaptive-Note and DeepNote share; each method brings its prompts
and its context (thresholds); the stop rule is nodes.stops.threshold_stop.

    question -> retrieve(q) -> init_note -> stop_check -> refine_query -> retrieve -> accumulate -> review
                                                |  ^                                                 |
                                                |  +------------------------------------------------+
                                                +--> answer (stop_reason: why)
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, StateGraph

from noterag.nodes.answer import answer
from noterag.nodes.notes import accumulate, init_note, refine_query, review
from noterag.nodes.retrieve import retrieve
from noterag.nodes.step import node, on_loop
from noterag.nodes.stops import stop_check, threshold_stop
from noterag.spec import Deps
from noterag.state import NoteState

ROLES = ("init_note", "refine_query", "accumulate", "review", "answer")


def wire(graph: StateGraph, deps: Deps) -> None:
    def after_retrieve(state: NoteState) -> Literal["init_note", "accumulate"]:
        return "accumulate" if state.get("best_note") is not None else "init_note"

    for step in (retrieve, init_note, refine_query, accumulate, review, answer):
        graph.add_node(step.__name__, node(step, deps))
    graph.add_node(
        "stop_check",
        stop_check(threshold_stop, deps, go_on="refine_query"),
        destinations=("refine_query", "answer"),
    )
    graph.add_edge("question", "retrieve")
    graph.add_conditional_edges("retrieve", on_loop(after_retrieve, trace=True))
    graph.add_edge("init_note", "stop_check")
    graph.add_edge("refine_query", "retrieve")
    graph.add_edge("accumulate", "review")
    graph.add_edge("review", "stop_check")
    graph.add_edge("answer", END)
