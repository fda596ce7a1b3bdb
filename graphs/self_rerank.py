"""Self-Rerank, the Adaptive-Note authors' simplification of Self-RAG (Asai et al., 2024) after
ActiveRAG (Xu et al., 2024), run against their method (Adaptive-Note Table 1; Amber reports it
too): one retrieval, each passage labelled useful / useless and relevant / irrelevant with a
reason in one call, then the answer from the labelled passages.

    P = retrieve(q)                           retrieve  (top_k = 5 passages for the question)
    L = LLM(self_rerank(q, P))                rerank    (two tags and a reason per passage)
    (single pass)                             stop_check (decision.single_pass)
    answer = LLM(prompt_g(q, L))              answer    (Adaptive-Note's generator, L as the note)

Its prompt is the authors' file ``prompts/en/self_rerank``. Prompts, defaults and
``profile="official"`` are the single-step baselines' (graphs/single_step.py: also why the
generator reads the labelled reply only, not a filtered or reordered passage list);
nodes/self_rerank.py says how the labels are read (shown in ``labels`` and the trace; counted
fallbacks). Tasks: multihop, asqa (Table 1), and strategyqa (no paper reports Self-Rerank
there). FlashRAG has no such method (its rerankers are trained cross-encoders).
"""

from __future__ import annotations

from noterag.core.progress import Declared, Line, Part
from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.single_step import SingleStepOutput, SingleStepState, declare
from noterag.nodes.self_rerank import PassageLabel, rerank
from noterag.prompts import self_rerank as prompts


class SelfRerankOutput(SingleStepOutput, total=False):
    """What a Self-Rerank run returns: also each passage's tags as read from the reply."""

    labels: list[PassageLabel]


class SelfRerankState(SingleStepState, SelfRerankOutput, total=False):
    pass


# The CLI's and the trace page's line for the labels: how many passages were judged useful,
# relevant, and how many labels did not read.
PROGRESS: Declared = {
    "labels": Line(
        "labelled {{ labels | length }} passages: "
        "{{ labels | selectattr('useful') | list | length }} useful, "
        "{{ labels | selectattr('relevant') | list | length }} relevant",
        Part(
            "{% for label in labels if none in (label.get('useful'), label.get('relevant')) %}"
            "{% if loop.first %} ({{ loop.length }} without a readable label){% endif %}"
            "{% endfor %}",
            "yellow",
        ),
        style="cyan",
    )
}


SPEC = declare(
    name="self-rerank",
    title="Self-Rerank (Self-RAG simplified, after ActiveRAG)",
    summary="each top-k passage labelled useful/useless and relevant/irrelevant in one call, "
    "then the answer from the labels (Adaptive-Note's single-time baseline)",
    step=rerank,
    role="rerank",
    prompts=prompts,
    progress=PROGRESS,
    state=SelfRerankState,
    output=SelfRerankOutput,
    result_fields=("labels",),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
