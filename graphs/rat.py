"""RAT (Wang et al., 2024): Retrieval Augmented Thoughts, as the authors' notebook
(CraftJarvis/RAT, creative.ipynb) runs it, with noterag's retriever in place of web search:

    T = LLM_draft(q);  T_1 .. T_n = split(T)     (n <= max_steps)            draft
    A = ""
    for i = 1 .. n:                                                          stop_check (rat_stop)
        A_i = A + "\\n\\n" + T_i
        Q_i = LLM_query(q, A_i)                                              query
        P_i = retrieve(Q_i)                       (top-k passages)           retrieve
        A = LLM_revise(P_i, q, A_i)               (A_i if nothing found)     revise
    answer = LLM_answer(q, A)                     (ours: the task's prompt)  answer

Each step is revised once, in order, and the next step's query reads the revision of every
step before it. max_steps (3) caps the steps: a longer draft's last step holds the rest of it
(the demo app asks its splitter for fewer than 4 paragraphs; the notebook revises every
paragraph); top_k (5) is DeepNote's, which compares against RAT. noterag.nodes.rat says what
stands in for the web pages and why one revision per step. Model roles (``<role>_model=``):
draft, query, revise, answer. FlashRAG has no RAT pipeline.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from langgraph.graph import END, StateGraph

from noterag.core.context import MOST_STEPS, RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import Profile
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.rat import answer, draft, query, revise
from noterag.nodes.retrieve import retrieve
from noterag.prompts import rat as prompts


@dataclass(kw_only=True)
class RATContext(RunContext):
    """RAT's step cap; top_k is the passages per step's query."""

    # profile="original": the notebook's sampling (CraftJarvis/RAT @ 38afdf8, creative.ipynb:
    # temperature = 1.0 in get_draft, get_query and get_revise_answer).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {"temperature": 1.0}

    max_steps: int = field(
        default=3,
        metadata={
            "description": "The most draft steps revised, one query and one revision each; a "
            "longer draft's last step holds the rest of it.",
            "ge": 1,
            "le": MOST_STEPS,
        },
    )


class RATOutput(CostFields, ChatFields, total=False):
    """What a RAT run returns: the draft, its steps, and the revised draft the answer read."""

    question: str
    answer: str
    draft: str  # the zero-shot chain of thought
    thoughts: list[str]  # the draft's steps, in order
    revised: str  # the draft as revised, step by step (RAT's own output)
    passage_ids: Annotated[list[str], merge_unique]
    steps: int  # steps begun (the last one's number)
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class RATState(RATOutput, total=False):
    """The loop state: the output plus the current step's values."""

    task: str
    current: str  # the revised steps so far + the current step as drafted
    query: str  # the current step's query
    queries: list[str]  # what the shared retrieve step searches ([]: skip)
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]


ROLES = ("draft", "query", "revise", "answer")


def wire(graph: StateGraph, deps: Deps) -> None:
    for step in (draft, query, retrieve, revise, answer):
        graph.add_node(step.__name__, node(step, deps))
    check = Decision(rat_stop, go_on="query")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "draft")
    graph.add_edge("draft", "stop_check")
    graph.add_edge("query", "retrieve")
    graph.add_edge("retrieve", "revise")
    graph.add_edge("revise", "stop_check")
    graph.add_edge("answer", END)


# How the CLI and the trace page show RAT's own events (MethodSpec.progress).
PROGRESS: Declared = {
    "draft": Line(
        "drafted a chain of thought: {{ thoughts | default(0) | int }} step(s) to revise",
        style="cyan",
    ),
    "query": Line("query: {{ query or '(none: step skipped)' }}", style="cyan"),
    "revision": (
        Line("step revised with {{ passages | length }} passage(s)", style="green", when="revised"),
        Line("step not revised", style="yellow", when="not revised"),
    ),
}


def rat_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """RAT: every step of the draft was revised (the draft holds at most max_steps steps)."""
    total, steps = len(state.get("thoughts") or []), state.get("steps", 0)
    if steps >= total:
        return f"every step of the draft revised ({steps} of {total}; max_steps = {ctx.max_steps})"
    return None


SPEC = MethodSpec(
    name="rat",
    title="RAT (Wang et al., 2024)",
    summary="retrieval-augmented thoughts: a chain-of-thought draft, each step revised in turn "
    "with passages retrieved for it, then the answer",
    context=RATContext,
    state=RATState,
    stops=(rat_stop,),
    output=RATOutput,
    roles=ROLES,
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("revised",),
    trace_view="generic",
    progress=PROGRESS,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
