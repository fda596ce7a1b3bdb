"""DeepNote (Wang et al., 2025): note-centric deep retrieval.

    P_0 = retrieve(q_0);  N_opt = N_0 = LLM_Init(q_0, P_0)                 init_note
    for t = 1 ..:
        q_t = LLM_QR(q_0, N_opt, Q_log)                                     refine_query
        P_t = retrieve(q_t);  N_t = LLM_KA(q_0, P_t, N_opt)                  accumulate
        V_t = LLM_ARD(q_0, N_opt, N_t);  V_t ? N_opt = N_t : failures += 1   review
    until failures >= max_failures or steps >= max_steps                   review (threshold_stop)
    answer = LLM_Ans(q_0, N_opt)                                            answer

The paper's stages are the graph's steps (§3): note initialization retrieves and writes N_0;
knowledge accumulation retrieves with q_t and updates the note; the adaptive retrieval decision
reviews N_t and decides whether to go on (the stop rule is also tested after init_note).

The paper (§3.3) stops on max failure and max step only, so ``profile="paper"`` has no passage
cap unless ``max_passages`` is set. The official code also stops once more than ``--max_top_k``
(15) distinct passages were read (``>``): ``profile="official"`` keeps that cap.
"""

from __future__ import annotations

from noterag.core.context import DeepNoteContext
from noterag.core.spec import MethodSpec
from noterag.core.state import NoteOutput, NoteState
from noterag.graphs import note_loop
from noterag.graphs.assemble import builder, server_graph
from noterag.prompts import deepnote as prompts

SPEC = MethodSpec(
    name="deepnote",
    title="DeepNote (Wang et al., 2025)",
    summary="note-centric deep retrieval: init note, query refinement, knowledge accumulation, "
    "adaptive retrieval decision, note-informed answer",
    context=DeepNoteContext,
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
    official_code="deepnote",
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
