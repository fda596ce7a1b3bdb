"""No retrieval, the papers' closed-book baseline ("Direct Prompting" in ReSP):

    answer = LLM(prompt(q))         answer     (the task's prompt, the question alone)

``retriever`` is accepted like every method's, and never searched.
"""

from __future__ import annotations

from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.single_pass import declare
from noterag.prompts import baselines, flashrag

SPEC = declare(
    name="no-retrieval",
    title="No retrieval",
    summary="the question alone in the answer prompt, one call (closed book)",
    steps=(),
    prompts=baselines.NO_RETRIEVAL,
    flashrag=flashrag.NO_RETRIEVAL,  # ReSP Table 2 reprints FlashRAG's runs
    trace_view="none",
    retrieves=False,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
