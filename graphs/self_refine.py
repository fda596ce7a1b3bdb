"""Self-Refine, the Adaptive-Note authors' simplification of Self-RAG (Asai et al., 2024) after
ActiveRAG (Xu et al., 2024), run against their method (Adaptive-Note Table 1; Amber reports it
too): one retrieval, the passages' useful information summarised and analysed in one call,
then the answer from that refinement. (Not Madaan et al.'s iterative Self-Refine.)

    P = retrieve(q)                           retrieve  (top_k = 5 passages for the question)
    R = LLM(self_refine(q, P))                refine    (useful information, summary, analysis)
    (single pass)                             stop_check (decision.single_pass)
    answer = LLM(prompt_g(q, R))              answer    (Adaptive-Note's generator, R as the note)

Its prompt is the authors' file ``prompts/en/self_refine``. Prompts, defaults and
``profile="official"`` are the single-step baselines' (graphs/single_step.py: also why the
generator reads the refinement only); nodes/self_refine.py says the rest. Tasks: multihop, asqa
(Table 1), and strategyqa (no paper reports Self-Refine there). FlashRAG has no such method
(its abstractive refiners are trained compressors; the pipeline shape is the same).
"""

from __future__ import annotations

from noterag.core.progress import Line
from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.single_step import declare
from noterag.nodes.self_refine import refine
from noterag.prompts import self_refine as prompts

SPEC = declare(
    name="self-refine",
    title="Self-Refine (Self-RAG simplified, after ActiveRAG)",
    summary="the top-k passages' useful information summarised in one call, then the answer "
    "from the summary (Adaptive-Note's single-time baseline)",
    step=refine,
    role="refine",
    prompts=prompts,
    progress={
        "refinement": Line(
            "refined {{ passages | default(0) }} passages into a summary "
            "({{ refinement | words }} words)",
            style="cyan",
        )
    },
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
