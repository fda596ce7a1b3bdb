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
the loop, since the paper requires Q* to be new but does not say what happens otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from noterag.context import ReSPContext, resolve_context
from noterag.methods import lazy_graph, method_deps
from noterag.nodes.answer import answer
from noterag.nodes.question import question
from noterag.nodes.resp import judge, plan, summarize
from noterag.nodes.retrieve import retrieve
from noterag.nodes.step import node
from noterag.prompts import resp as prompts
from noterag.state import QuestionInput, ReSPOutput, ReSPState

NAME = "resp"
CONTEXT = ReSPContext
ROLES = ("reasoner", "summarizer", "generator")
STAGE_ROLES = {
    "judge": "reasoner",
    "plan": "reasoner",
    "global_summary": "summarizer",
    "local_summary": "summarizer",
    "answer": "generator",
}


def stop_reason(state: Mapping[str, Any], ctx: Any, profile: Any = None) -> str | None:
    """Why the loop stops now, or None: the judge said Yes, the plan gave nothing new, or M
    iterations ran."""
    if state.get("sufficient"):
        return "the reasoner judged the memory sufficient"
    if state.get("stalled"):
        return state["stalled"]
    if state.get("steps", 0) >= ctx.max_steps:
        return f"{state['steps']} iteration(s) (max_steps = {ctx.max_steps})"
    return None


def build(model: Any = None, retriever: Any = None, **role_models: Any) -> Any:
    deps = method_deps(NAME, {"paper": prompts.PAPER}, ReSPContext, ROLES, model, retriever, role_models)
    deps.stage_roles = STAGE_ROLES
    deps.stop_rule = stop_reason

    def stopped(state: ReSPState, runtime: Runtime) -> bool:
        return stop_reason(state, resolve_context(ReSPContext, runtime.context)) is not None

    def after_judge(state: ReSPState, runtime: Runtime) -> Literal["plan", "answer"]:
        return "answer" if stopped(state, runtime) else "plan"

    def after_plan(state: ReSPState, runtime: Runtime) -> Literal["retrieve", "answer"]:
        return "answer" if stopped(state, runtime) else "retrieve"

    graph = StateGraph(
        ReSPState, context_schema=ReSPContext, input_schema=QuestionInput, output_schema=ReSPOutput
    )
    for step in (retrieve, summarize, judge, plan, answer):
        graph.add_node(step.__name__, node(step, deps))
    graph.add_node("question", question)
    graph.add_edge(START, "question")
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "summarize")
    graph.add_edge("summarize", "judge")
    graph.add_conditional_edges("judge", after_judge)
    graph.add_conditional_edges("plan", after_plan)
    graph.add_edge("answer", END)
    return graph.compile(name=NAME)


__getattr__ = lazy_graph(build, globals())
