"""No retrieval, the papers' closed-book baseline ("Direct Prompting" in ReSP):

    answer = LLM(prompt(q))         answer     (the task's prompt, the question alone)

``retriever`` is accepted like every method's, and never searched.
"""

from __future__ import annotations

from noterag.context import BaselineContext
from noterag.graphs.single_pass import wiring
from noterag.prompts import baselines
from noterag.spec import MethodSpec, server_graph
from noterag.state import BaselineOutput, BaselineState

SPEC = MethodSpec(
    name="no-retrieval",
    title="No retrieval",
    summary="the question alone in the answer prompt, one call (closed book)",
    context=BaselineContext,
    state=BaselineState,
    output=BaselineOutput,
    roles=("answer",),
    prompts={"paper": baselines.NO_RETRIEVAL, "official": baselines.NO_RETRIEVAL},
    wire=wiring(()),
    trace_view="none",
    official_code="adaptive-note",  # the run's official_code setting chooses
)

build = SPEC.build
make_graph = server_graph(SPEC)  # langgraph.json
