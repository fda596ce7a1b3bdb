"""Vanilla RAG, the papers' single-round baseline ("fair top-k" runs set top_k to the mean
number of distinct passages the compared method read):

    P = retrieve(q)                 retrieve   (top_k passages)
    answer = LLM(prompt(q, P))      answer     (the task's prompt, passages formatted by the profile)
"""

from __future__ import annotations

from noterag.context import BaselineContext
from noterag.graphs.single_pass import wiring
from noterag.nodes.retrieve import retrieve
from noterag.prompts import baselines
from noterag.spec import MethodSpec, server_graph
from noterag.state import BaselineOutput, BaselineState

SPEC = MethodSpec(
    name="vanilla",
    title="Vanilla RAG",
    summary="top-k passages in the answer prompt, one call (the papers' single-round baseline)",
    context=BaselineContext,
    state=BaselineState,
    output=BaselineOutput,
    roles=("answer",),
    # the papers print no baseline prompts: both profiles send the official files (their
    # passage formats differ; noterag.profiles)
    prompts={"paper": baselines.VANILLA, "official": baselines.VANILLA},
    wire=wiring((retrieve,)),
    trace_view="single",
    official_code="adaptive-note",  # the run's official_code setting chooses
)

build = SPEC.build
make_graph = server_graph(SPEC)  # langgraph.json
