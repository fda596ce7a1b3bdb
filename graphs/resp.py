"""ReSP (Jiang et al., 2024): Retrieve, Summarize, Plan. Algorithm 1:

    q <- Q;  S_Global <- [];  S_Local <- [];  run_cnt <- 0;  if_finished <- False
    while not if_finished and run_cnt < M:
        run_cnt <- run_cnt + 1
        D_q <- R(q)                                                          retrieve
        if q != Q:  S_Local <- S_Local + LLM_Sum([q, D_q], Prompt_local)     summarize: local_summary
        S_Global <- S_Global + LLM_Sum([Q, D_q], Prompt_global)                  || global_summary
        if_finished <- LLM_Reason([Q, S_Global, S_Local], Prompt_judge)      judge
        if not if_finished:
            Q* <- LLM_Reason([Q, S_Global, S_Local], Prompt_plan);  q <- Q*  plan
    A <- LLM_Gen([Q, S_Global, S_Local], Prompt_Gen)                         answer

M is the context field max_steps (3), the documents per retrieval top_k (5). Model roles
(``<role>_model=``): reasoner (judge, plan), summarizer (both summaries), generator (answer).
Where this differs from the box: the plan runs only while run_cnt < M (the box's last plan is
never retrieved), and a Q* that repeats a retrieved sub-question (Q included) or is empty stops
the loop, since the paper requires Q* to be new but does not say what happens otherwise. The
two tests are resp_stop, decided by the judge step, and resp_stalled, by the plan
step (each step routes on its own outcome: one graph step, as one line of the box).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.graph import END, StateGraph

from noterag.core.context import ReSPContext
from noterag.core.decision import Decision
from noterag.core.profiles import Profile
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ReSPOutput, ReSPState
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.answer import answer
from noterag.nodes.resp import judge, plan, summarize
from noterag.nodes.retrieve import retrieve
from noterag.prompts import resp as prompts


def wire(graph: StateGraph, deps: Deps) -> None:
    finished = Decision(resp_stop, go_on="plan")
    stalled = Decision(resp_stalled, go_on="retrieve")
    for step in (retrieve, summarize, answer):
        graph.add_node(step.__name__, node(step, deps))
    graph.add_node("judge", node(judge, deps, then=finished))
    graph.add_node("plan", node(plan, deps, then=stalled))
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "summarize")
    graph.add_edge("summarize", "judge")
    graph.add_conditional_edges("judge", finished.route, finished.routes)
    graph.add_conditional_edges("plan", stalled.route, stalled.routes)
    graph.add_edge("answer", END)


# How `noterag ask` and the trace page show ReSP's own events (MethodSpec.progress).
PROGRESS: Declared = {
    "summaries": Line(
        "summarised the evidence{{ ' (global and local pathway)' if local_summary }}",
        style="cyan",
    ),
    "judgment": (
        Line("reasoner: enough to answer", style="green", when="sufficient"),
        Line(
            "reasoner: not enough yet"
            "{{ '' if parsed | default(true) else ' (reply did not parse)' }}",
            style="yellow",
            when="not sufficient",
        ),
    ),
    "sub_question": (
        Line("sub-question: {{ sub_question }}", style="cyan", when="accepted"),
        Line("plan refused: {{ reason }}", style="red", when="not accepted"),
    ),
}


def resp_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReSP, after the reasoner's judge (Algorithm 1): the memory suffices, or M iterations ran."""
    if state.get("sufficient"):
        return "the reasoner judged the memory sufficient"
    if state.get("steps", 0) >= ctx.max_steps:
        return f"{state['steps']} iteration(s) (max_steps = {ctx.max_steps})"
    return None


def resp_stalled(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReSP, after the plan: a plan that names nothing new to retrieve ends the loop (ours: the
    paper leaves it open; re-asking the same prompt would mostly repeat the same reply)."""
    return state.get("stalled") or None


SPEC = MethodSpec(
    name="resp",
    title="ReSP (Jiang et al., 2024)",
    summary="retrieve, summarize (global evidence + local pathway memory queues), plan",
    context=ReSPContext,
    state=ReSPState,
    stops=(resp_stop, resp_stalled),
    queries="query_log",
    output=ReSPOutput,
    roles=("reasoner", "summarizer", "generator"),
    stage_roles={
        "judge": "reasoner",
        "plan": "reasoner",
        "global_summary": "summarizer",
        "local_summary": "summarizer",
        "answer": "generator",
    },
    prompts={"paper": prompts.PAPER},
    wire=wire,
    result_fields=("memory",),
    trace_view="resp",
    progress=PROGRESS,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
