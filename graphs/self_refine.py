"""Self-Refine, the Adaptive-Note authors' simplification of Self-RAG (Asai et al., 2024) after
ActiveRAG (Xu et al., 2024), run against their method (Adaptive-Note Table 1; Amber reports it
too): one retrieval, the passages' useful information summarised and analysed in one call,
then the answer from that refinement. (Not Madaan et al.'s iterative Self-Refine.)

    P = retrieve(q)                           retrieve  (top_k = 5 passages for the question)
    R = LLM(self_refine(q, P))                refine    (useful information, summary, analysis)
    (single pass)                             stop_check (nodes.stops.single_pass)
    answer = LLM(prompt_g(q, R))              answer    (Adaptive-Note's generator, R as the note)

Prompts: the authors' file thunlp/Adaptive-Note ``prompts/en/self_refine`` (byte for byte,
rendered with ``str.format``) and Adaptive-Note's own answer prompts, which the paper aligns
across every method (noterag.prompts.self_refine). The official code does not run this
baseline, and ActiveRAG's released code (OpenMatch/ActiveRAG @ 9cc79cc, src/prompt.py) has only
its own agents' prompts, not these baselines'; so how it runs is read from the file and the
papers: graphs/single_step.py gives the reasons for the two calls and for the generator reading
the refinement only, nodes/self_refine.py for the rest. FlashRAG has no such method (its
abstractive refiners are trained compressors; the pipeline shape is the same).

Defaults are the papers': top-k 5, BM25 (the default index). Tasks: multihop, asqa (Table 1),
and strategyqa with the StrategyQA answer prompt Adaptive-Note borrows from DeepNote (no paper
reports Self-Refine there); crud is refused (the authors used Chinese prompt files).
``profile="official"``: the Adaptive-Note code's conventions around the same file (passages as
"Passage #i Title: ...", sampling 0.1 / 0.9 / 1280 tokens, the official ``gen_answer`` files).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from noterag.graphs.single_step import SingleStepContext, SingleStepOutput, SingleStepState, wiring
from noterag.nodes.self_refine import refine
from noterag.prompts import self_refine as prompts
from noterag.spec import MethodSpec, server_graph


def refinement_line(event: Mapping[str, Any]) -> Text:
    """The CLI's progress line for the refinement."""
    words = len(str(event.get("refinement") or "").split())
    return Text(
        f"refined {event.get('passages', 0)} passages into a summary ({words} words)", style="cyan"
    )


SPEC = MethodSpec(
    name="self-refine",
    title="Self-Refine (Self-RAG simplified, after ActiveRAG)",
    summary="the top-k passages' useful information summarised in one call, then the answer "
    "from the summary (Adaptive-Note's single-time baseline)",
    context=SingleStepContext,
    state=SingleStepState,
    output=SingleStepOutput,
    roles=("refine", "answer"),
    prompts={"paper": prompts.PAPER, "official": prompts.OFFICIAL},
    wire=wiring(refine),
    result_fields=("best_note",),
    trace_view="generic",
    progress={"refinement": refinement_line},
    official_code="adaptive-note",
)

build = SPEC.build
make_graph = server_graph(SPEC)  # langgraph.json
