"""The note-centric loop that Adaptive-Note and DeepNote share; each method brings its prompts,
context (thresholds) and stop rule.

    retrieve(q) -> init_note -> [stop?] -> refine_query -> retrieve -> accumulate -> review -> [stop?]
                                   |                                                             |
                                   +--> answer <------------------- stop ------------------------+

Like every method's graph, it starts with the ``question`` step (noterag.nodes.question): the
question from ``{"question": ...}`` or a chat's ``{"messages": [...]}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from noterag.context import resolve_context
from noterag.nodes.answer import answer
from noterag.nodes.notes import accumulate, init_note, refine_query, review
from noterag.nodes.question import question
from noterag.nodes.retrieve import retrieve
from noterag.nodes.step import Deps, node
from noterag.profiles import Profile, get_profile
from noterag.state import NoteOutput, NoteState, QuestionInput

StopRule = Callable[[Mapping[str, Any], Any, Profile], str | None]


def threshold_stop(state: Mapping[str, Any], ctx: Any, profile: Profile) -> str | None:
    """Why the loop stops now, or None. Adaptive-Note's Eq. 8, Stop = 1{IU >= T_IU or
    CI >= T_CI or RP >= T_RP}, and DeepNote's rule (max failure, max step; §3.3) are the same
    test: failed steps, steps, distinct passages (the cap: the profile decides >= or >, as the
    official DeepNote code uses >; DeepNote's paper profile has none unless set). The official
    loop tests failures after a step only: there, max_failures=0 still runs one step."""
    failures, steps, seen = state.get("failures", 0), state.get("steps", 0), len(state.get("seen", []))
    if failures >= ctx.max_failures and (steps > 0 or profile.failures_checked_at_init):
        return f"{failures} failed step(s) (max_failures = {ctx.max_failures})"
    if steps >= ctx.max_steps:
        return f"{steps} step(s) (max_steps = {ctx.max_steps})"
    cap = profile.cap(ctx.max_passages)
    if cap is not None and profile.cap_reached(seen, cap):
        return f"{seen} distinct passages (max_passages = {cap})"
    return None


def build(deps: Deps, stop_rule: StopRule = threshold_stop) -> Any:
    deps.stop_rule = stop_rule

    def after_retrieve(state: NoteState) -> Literal["init_note", "accumulate"]:
        return "accumulate" if state.get("best_note") is not None else "init_note"

    def should_continue(state: NoteState, runtime: Runtime) -> Literal["refine_query", "answer"]:
        ctx = resolve_context(deps.context_schema, runtime.context)
        stop = stop_rule(state, ctx, get_profile(ctx.profile, deps.method))
        return "answer" if stop else "refine_query"

    graph = StateGraph(
        NoteState,
        context_schema=deps.context_schema,
        input_schema=QuestionInput,
        output_schema=NoteOutput,
    )
    for step in (retrieve, init_note, refine_query, accumulate, review, answer):
        graph.add_node(step.__name__, node(step, deps))
    graph.add_node("question", question)
    graph.add_edge(START, "question")
    graph.add_edge("question", "retrieve")
    graph.add_conditional_edges("retrieve", after_retrieve)
    graph.add_conditional_edges("init_note", should_continue)
    graph.add_edge("refine_query", "retrieve")
    graph.add_edge("accumulate", "review")
    graph.add_conditional_edges("review", should_continue)
    graph.add_edge("answer", END)
    return graph.compile(name=deps.method)
