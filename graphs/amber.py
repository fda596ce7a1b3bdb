"""Amber (Qin et al., 2025): Adaptive memory-based optimization for enhanced RAG.

    q_0 = q;  M_0 = {};  t = 0
    loop:
        C_t = retrieve(q_t)                                       retrieve   (unseen passages only)
        C_t = {c in C_t : F(q, c) = useful}                       chunk_filter     (concurrent)
        P_t = {helpful sentences of c : c in C_t}                 sentence_filter  (concurrent)
        m = LLM_init(q, P_t)            if t = 0                  init_memory
        m = LLM_update(q, P_t, M_opt)   else                      accumulate
        a = Reviewer(q, P_t, m)                                   reviewer
        s = Challenger(q, P_t, m, a)                              challenger
        m = Refiner(q, P_t, m, a, s)                              refiner
        M_opt = m  if t = 0 or f_c(q, M_opt, m) = True            memory_update
        stop if t + 1 >= max_steps or Sufficient(q, M_opt)        sufficiency   (adaptive information
        q_{t+1} = LLM_q(q, M_opt, query_log);  t += 1             refine_query   collector)
    answer = LLM_task(q, M_opt)                                   answer

max_steps (3) counts every iteration, the first (for q itself) included: Section 3.4 starts the
collector's loop at q_0 = q, and Table 4's "max iterations" (1, 2, 3) count that first one. The
state's ``steps`` is t of the last iteration (trace step 0 is the first one), as for the other
note methods. ``best_note`` holds M_opt. The ``sufficiency`` step itself decides both stop
conditions (amber_stop, on the state its update leads to); see noterag.nodes.amber
for what the paper leaves open (t = 0 without a comparison, when the sufficiency check is
skipped, parse fallbacks) and noterag.prompts.amber for the prompts (the note-updating,
sufficiency and answer prompts are not Amber's own).

Context switches ablate as Table 2: chunk_filter (w/o CF), sentence_filter (w/o SF), both
(w/o ALL), agent_updater (w/o AMU); a switched-off step passes its input on without a call.
Model roles (``<role>_model=``): every stage. The paper's multi-granular content filter is one
fine-tuned model for both levels: pass it as ``filter_model`` and ``extract_model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from langgraph.graph import END, StateGraph

from noterag.core.context import AmberContext
from noterag.core.decision import Decision
from noterag.core.profiles import AMBER_PAPER, Profile
from noterag.core.progress import Declared, Line, Part
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import AmberOutput, AmberState
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.amber import (
    accumulate,
    challenger,
    chunk_filter,
    init_memory,
    iterations_spent,
    memory_update,
    refiner,
    reviewer,
    sentence_filter,
    sufficiency,
)
from noterag.nodes.answer import answer
from noterag.nodes.notes import refine_query
from noterag.nodes.retrieve import retrieve
from noterag.prompts import amber as prompts


def wire(graph: StateGraph, deps: Deps) -> None:
    def draft(state: AmberState) -> Literal["init_memory", "accumulate"]:
        return "accumulate" if state.get("best_note") is not None else "init_memory"

    loop = (
        retrieve,
        chunk_filter,
        sentence_filter,
        init_memory,
        accumulate,
        reviewer,
        challenger,
        refiner,
        memory_update,
        refine_query,
        answer,
    )
    for step in loop:
        graph.add_node(step.__name__, node(step, deps))
    collect = Decision(amber_stop, go_on="refine_query")  # the adaptive information collector
    graph.add_node("sufficiency", node(sufficiency, deps, then=collect))
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "chunk_filter")
    graph.add_edge("chunk_filter", "sentence_filter")
    graph.add_conditional_edges("sentence_filter", draft)
    graph.add_edge("init_memory", "reviewer")
    graph.add_edge("accumulate", "reviewer")
    graph.add_edge("reviewer", "challenger")
    graph.add_edge("challenger", "refiner")
    graph.add_edge("refiner", "memory_update")
    graph.add_edge("memory_update", "sufficiency")
    graph.add_conditional_edges("sufficiency", collect.route, collect.routes)
    graph.add_edge("refine_query", "retrieve")
    graph.add_edge("answer", END)


# How `noterag ask` and the trace page show Amber's own events (MethodSpec.progress).
PROGRESS: Declared = {
    "filter": Line(
        "{{ 'kept' if useful else 'filtered out' }} {{ title or id | default('?') }}",
        Part(" (verdict did not parse: kept)", "yellow", when="not (parsed | default(true))"),
        style="{{ 'green' if useful else 'red' }}",
    ),
    "sentences": Line(
        "extracted helpful sentences of {{ passages | length }} "
        "{{ 'passage' if passages | length == 1 else 'passages' }}",
        style="cyan",
    ),
    "memory_review": Line("{{ agent | default('agent') }} revised the memory draft", style="cyan"),
    "sufficiency": Line(
        "memory {{ 'sufficient to answer' if sufficient else 'not sufficient yet' }}"
        "{{ ' (%s)' % reason if reason }}",
        style="{{ 'green' if sufficient else 'yellow' }}",
    ),
}


def amber_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """Amber's adaptive information collector: the memory is sufficient, or max_steps
    iterations ran."""
    iterations = state.get("steps", 0) + 1
    if state.get("sufficient"):
        return f"the memory was judged sufficient after {iterations} iteration(s)"
    if iterations_spent(state, ctx):
        return f"{iterations} iteration(s) (max_steps = {ctx.max_steps})"
    return None


SPEC = MethodSpec(
    name="amber",
    title="Amber (Qin et al., 2025)",
    summary="multi-granular content filter, agent-based memory updater, adaptive information "
    "collector (no official code: profile paper only)",
    context=AmberContext,
    state=AmberState,
    stops=(amber_stop,),
    queries="query_log",
    output=AmberOutput,
    roles=(
        "filter",
        "extract",
        "init_note",
        "accumulate",
        "reviewer",
        "challenger",
        "refiner",
        "review",
        "sufficiency",
        "refine_query",
        "answer",
    ),
    prompts={"paper": prompts.PAPER},
    wire=wire,
    result_fields=("best_note",),
    trace_view="amber",
    progress=PROGRESS,
    paper_profile=AMBER_PAPER,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
