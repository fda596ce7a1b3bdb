"""The note-centric loop that Adaptive-Note and DeepNote share; each method brings its prompts
and its context (thresholds); the stop rule is threshold_stop (below).

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

from collections.abc import Mapping
from typing import Any

from langgraph.graph import END, StateGraph

from noterag.core.decision import Decision
from noterag.core.profiles import Profile
from noterag.core.spec import Deps, SearchScript
from noterag.core.step import node
from noterag.nodes.answer import answer
from noterag.nodes.notes import accumulate, init_note, refine_query, review

ROLES = ("init_note", "refine_query", "accumulate", "review", "answer")
# a stand-in's refine_query reply that asks new questions (the paper profile reads numbered
# ones): the loop searches for them and accumulates what it finds (MethodSpec.search_script)
SEARCH_SCRIPT = SearchScript(
    {"refine_query": "1. When was the architect born?\n2. Where did the architect study?"}
)


def threshold_stop(state: Mapping[str, Any], ctx: Any, profile: Profile) -> str | None:
    """Adaptive-Note's Eq. 8, Stop = 1{IU >= T_IU or CI >= T_CI or RP >= T_RP}, and DeepNote's
    rule (max failure, max step; §3.3) are the same test: failed steps, steps, distinct passages
    (the cap: the profile decides >= or >, as the official DeepNote code uses >; DeepNote's paper
    profile has none unless set). The official loop tests failures after a step only: there,
    max_failures=0 still runs one step."""
    failures, steps, seen = (
        state.get("failures", 0),
        state.get("steps", 0),
        len(state.get("seen", [])),
    )
    if failures >= ctx.max_failures and (steps > 0 or profile.failures_checked_at_init):
        return f"{failures} failed step(s) (max_failures = {ctx.max_failures})"
    if steps >= ctx.max_steps:
        return f"{steps} step(s) (max_steps = {ctx.max_steps})"
    cap = profile.cap(ctx.max_passages)
    if cap is not None and profile.cap_reached(seen, cap):
        return f"{seen} distinct passages (max_passages = {cap})"
    return None


def wire(graph: StateGraph, deps: Deps) -> None:
    decide = Decision(threshold_stop, go_on="refine_query")
    graph.add_node("init_note", node(init_note, deps, then=decide))
    graph.add_node("refine_query", node(refine_query, deps))
    graph.add_node("accumulate", node(accumulate, deps))
    graph.add_node("review", node(review, deps, then=decide))
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "init_note")
    graph.add_conditional_edges("init_note", decide.route, decide.routes)
    graph.add_edge("refine_query", "accumulate")
    graph.add_edge("accumulate", "review")
    graph.add_conditional_edges("review", decide.route, decide.routes)
    graph.add_edge("answer", END)
