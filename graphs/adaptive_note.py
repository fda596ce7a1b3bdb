"""Adaptive-Note (Wang et al., 2024): Iterative Information Collector + Adaptive Memory Reviewer.

    P_0 = retrieve(q);  M_opt = N_0 = LLM(prompt_init(q, P_0))          init_note
    repeat:
        q_t = LLM(prompt_q(q, M_opt, Q_ask))                            refine_query
        P_t = retrieve(q_t);  N_t = LLM(prompt_update(q, P_t, M_opt))   accumulate
        f_c(N_t, M_opt) ? M_opt = N_t : IU += 1;  CI += 1               review
    until IU >= T_IU or CI >= T_CI or RP >= T_RP                        review (Eq. 8; threshold_stop)
    answer = LLM(prompt_g(q, M_opt))                                    answer

The paper's stages are the graph's steps: note initialization (stage 1) retrieves and writes
N_0, note updating (stage 3) retrieves with q_t and writes N_t, and the adaptive memory
reviewer both judges N_t ("what to store as the optimal memory") and decides "when to stop
retrieval" (graphs.note_loop).

T_CI, T_IU, T_RP are the context fields max_steps (3), max_failures (1), max_passages (15).
"""

from __future__ import annotations

from noterag.core.context import AdaptiveNoteContext
from noterag.core.spec import MethodSpec
from noterag.core.state import NoteOutput, NoteState
from noterag.graphs import note_loop
from noterag.graphs.assemble import builder, server_graph
from noterag.prompts import adaptive_note as prompts

SPEC = MethodSpec(
    name="adaptive-note",
    title="Adaptive-Note (Wang et al., 2024)",
    summary="iterative information collector + adaptive memory reviewer over one growing note",
    context=AdaptiveNoteContext,
    state=NoteState,
    stops=(note_loop.threshold_stop,),
    queries="query_log",
    output=NoteOutput,
    roles=note_loop.ROLES,
    prompts={"paper": prompts.PAPER, "official": prompts.OFFICIAL},
    wire=note_loop.wire,
    result_fields=("best_note",),
    trace_view="note",
    search_script=note_loop.SEARCH_SCRIPT,
    official_code="adaptive-note",
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
