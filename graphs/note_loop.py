"""The note-centric loop that Adaptive-Note and DeepNote share; each method brings its prompts
and its context (thresholds); the stop rule is nodes.stops.threshold_stop.

One graph step per paper step, as the papers divide them (DeepNote §3, Adaptive-Note §3): note
initialization retrieves with the question and writes the first note; knowledge accumulation
retrieves with the refined queries and updates the note; the adaptive retrieval decision (the
memory reviewer) judges the new note and decides whether to retrieve again, the decision and
its reason in one ``Command``, tested where the papers test it: after each note.

    question -> init_note -+-> refine_query -> accumulate -> review -+
                           |        ^                                |
                           |        +------------ go on -------------+
                           +--> answer <--------- stop --------------+   (stop_reason: why)
"""

from __future__ import annotations

from langgraph.graph import END, StateGraph

from noterag.nodes.answer import answer
from noterag.nodes.notes import accumulate, init_note, refine_query, review
from noterag.nodes.stops import Decision, threshold_stop
from noterag.spec import Deps
from noterag.step import node

ROLES = ("init_note", "refine_query", "accumulate", "review", "answer")


def wire(graph: StateGraph, deps: Deps) -> None:
    decide = Decision(threshold_stop, go_on="refine_query")
    graph.add_node(
        "init_note", node(init_note, deps, then=decide), destinations=decide.destinations
    )
    graph.add_node("refine_query", node(refine_query, deps))
    graph.add_node("accumulate", node(accumulate, deps))
    graph.add_node("review", node(review, deps, then=decide), destinations=decide.destinations)
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "init_note")
    graph.add_edge("refine_query", "accumulate")
    graph.add_edge("accumulate", "review")
    graph.add_edge("answer", END)
