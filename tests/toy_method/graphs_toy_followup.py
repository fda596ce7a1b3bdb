"""Toy follow-up (tests/test_toy_method.py): a method added as files only, as a contributor adds
one (docs/methods.md, "Adding a method"). The test copies this file to graphs/toy_followup.py of
a copy of the package tree, beside nodes_toy_followup.py and prompts_toy_followup.py:

    known = the top-k passages for q                       retrieve
    repeat:  f = LLM(follow-up prompt(q, known))           follow_up
             if f is no question: stop                     stop_check (no_follow_up)
             known += the passages retrieved for f
    until max_steps follow-ups
    answer = LLM(answer prompt(q, known))                  answer
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any

from langgraph.graph import END, StateGraph

from noterag.core.context import MOST_STEPS, RunContext, setting
from noterag.core.decision import Decision, stop_check
from noterag.core.progress import Line
from noterag.core.spec import Deps, MethodSpec, SearchScript
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.answer import answer
from noterag.nodes.retrieve import retrieve
from noterag.nodes.toy_followup import follow_up
from noterag.prompts import toy_followup as prompts


@dataclass(kw_only=True)
class FollowUpContext(RunContext):
    max_steps: int = setting(3, "Follow-up questions at most.", ge=1, le=MOST_STEPS)


class FollowUpOutput(CostFields, ChatFields, total=False):
    """What a run returns (``ask --json``, Studio's output)."""

    question: str
    answer: str
    follow_ups: Annotated[list[str], operator.add]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class FollowUpState(FollowUpOutput, total=False):
    task: str
    best_note: str  # what is known: the answer prompt's {note}
    asked_none: bool  # the last reply asked no follow-up question
    passages: list[Passage]  # the question's, from the shared retrieve step
    seen: Annotated[list[str], merge_unique]


def no_follow_up(state: Any, ctx: Any, profile: Any) -> str | None:
    """Stop when the model asks no follow-up question, or after max_steps of them."""
    steps = state.get("steps", 0)
    if state.get("asked_none"):
        return f"no follow-up question after {steps} step(s)"
    return f"{steps} follow-ups (max_steps = {ctx.max_steps})" if steps >= ctx.max_steps else None


def wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("retrieve", node(retrieve, deps))
    graph.add_node("follow_up", node(follow_up, deps))
    check = Decision(no_follow_up, go_on="follow_up")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "follow_up")
    graph.add_edge("follow_up", "stop_check")
    graph.add_edge("answer", END)


SPEC = MethodSpec(
    name="toy-followup",
    title="Toy follow-up (tests/test_toy_method.py)",
    summary="asks follow-up questions and reads their passages until it asks none",
    context=FollowUpContext,
    state=FollowUpState,
    output=FollowUpOutput,
    stops=(no_follow_up,),
    roles=("follow_up", "answer"),
    prompts={"paper": prompts.PAPER},
    wire=wire,
    result_fields=("follow_ups",),
    queries="follow_ups",
    trace_view="generic",
    progress={"follow_up": Line("follow-up: {{ question }}")},
    # the reply that makes a stand-in model's run search (the generic tests' default, "ok", asks
    # no follow-up question)
    search_script=SearchScript({"follow_up": "When was the architect born?"}),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
