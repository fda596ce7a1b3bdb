"""Vanilla RAG, the papers' single-round baseline ("fair top-k" runs set top_k to the mean
number of distinct passages the compared method read):

    P = retrieve(q)                 retrieve   (top_k passages)
    answer = LLM(prompt(q, P))      answer     (the task's prompt, passages formatted by the profile)
"""

from __future__ import annotations

from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.single_pass import declare
from noterag.nodes.retrieve import retrieve
from noterag.prompts import baselines, flashrag

SPEC = declare(
    name="vanilla",
    title="Vanilla RAG",
    summary="top-k passages in the answer prompt, one call (the papers' single-round baseline)",
    steps=(retrieve,),
    prompts=baselines.VANILLA,
    flashrag=flashrag.VANILLA,  # ReSP Table 2 reprints FlashRAG's runs
    trace_view="single",
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
