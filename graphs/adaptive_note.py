"""Adaptive-Note (Wang et al., 2024): Iterative Information Collector + Adaptive Memory Reviewer.

    P_0 = retrieve(q);  M_opt = N_0 = LLM(prompt_init(q, P_0))
    repeat:
        q_t = LLM(prompt_q(q, M_opt, Q_ask))            refine_query
        P_t = retrieve(q_t)                             retrieve
        N_t = LLM(prompt_update(q, P_t, M_opt))         accumulate
        f_c(N_t, M_opt) ? M_opt = N_t : IU += 1         review;  CI += 1
    until IU >= T_IU or CI >= T_CI or RP >= T_RP        (Eq. 8; note_loop.threshold_stop)
    answer = LLM(prompt_g(q, M_opt))                    answer

T_CI, T_IU, T_RP are the context fields max_steps (3), max_failures (1), max_passages (15).
"""

from __future__ import annotations

from typing import Any

from noterag.context import AdaptiveNoteContext
from noterag.graphs import note_loop
from noterag.methods import lazy_graph, method_deps
from noterag.prompts import adaptive_note as prompts

NAME = "adaptive-note"
CONTEXT = AdaptiveNoteContext
ROLES = ("init_note", "refine_query", "accumulate", "review", "answer")


def build(model: Any = None, retriever: Any = None, **role_models: Any) -> Any:
    deps = method_deps(NAME, {"paper": prompts.PAPER, "official": prompts.OFFICIAL}, AdaptiveNoteContext, ROLES, model, retriever, role_models)
    return note_loop.build(deps)


__getattr__ = lazy_graph(build, globals())
