"""Self-Rerank, the Adaptive-Note authors' simplification of Self-RAG (Asai et al., 2024) after
ActiveRAG (Xu et al., 2024), run against their method (Adaptive-Note Table 1; Amber reports it
too): one retrieval, each passage labelled useful / useless and relevant / irrelevant with a
reason in one call, then the answer from the labelled passages.

    P = retrieve(q)                           retrieve  (top_k = 5 passages for the question)
    L = LLM(self_rerank(q, P))                rerank    (two tags and a reason per passage)
    (single pass)                             stop_check (nodes.stops.single_pass)
    answer = LLM(prompt_g(q, L))              answer    (Adaptive-Note's generator, L as the note)

Prompts: the authors' file thunlp/Adaptive-Note ``prompts/en/self_rerank`` (byte for byte,
rendered with ``str.format``) and Adaptive-Note's own answer prompts, which the paper aligns
across every method (noterag.prompts.self_rerank). The official code does not run this
baseline, and ActiveRAG's released code (OpenMatch/ActiveRAG @ 9cc79cc, src/prompt.py) has only
its own agents' prompts, not these baselines'; so how it runs is read from the file and the
papers: graphs/single_step.py gives the reasons for the two calls and for the generator reading
the labelled reply only (not a filtered or reordered passage list), nodes/self_rerank.py how
the labels are read (shown in ``labels`` and the trace; counted fallbacks). FlashRAG has no
such method (its rerankers are trained cross-encoders).

Defaults are the papers': top-k 5, BM25 (the default index). Tasks: multihop, asqa (Table 1),
and strategyqa with the StrategyQA answer prompt Adaptive-Note borrows from DeepNote (no paper
reports Self-Rerank there); crud is refused (the authors used Chinese prompt files).
``profile="official"``: the Adaptive-Note code's conventions around the same file (passages as
"Passage #i Title: ...", sampling 0.1 / 0.9 / 1280 tokens, the official ``gen_answer`` files).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from noterag.graphs.single_step import SingleStepContext, SingleStepOutput, SingleStepState, wiring
from noterag.nodes.self_rerank import PassageLabel, rerank
from noterag.prompts import self_rerank as prompts
from noterag.spec import MethodSpec, server_graph


class SelfRerankOutput(SingleStepOutput, total=False):
    """What a Self-Rerank run returns: also each passage's tags as read from the reply."""

    labels: list[PassageLabel]


class SelfRerankState(SingleStepState, SelfRerankOutput, total=False):
    pass


def labels_line(event: Mapping[str, Any]) -> Text:
    """The CLI's progress line for the labels: how many passages were judged useful, relevant."""
    labels = list(event.get("labels") or [])
    useful = sum(1 for label in labels if label.get("useful"))
    relevant = sum(1 for label in labels if label.get("relevant"))
    unread = sum(1 for label in labels if None in (label.get("useful"), label.get("relevant")))
    text = Text(
        f"labelled {len(labels)} passages: {useful} useful, {relevant} relevant", style="cyan"
    )
    if unread:
        text.append(f" ({unread} without a readable label)", style="yellow")
    return text


SPEC = MethodSpec(
    name="self-rerank",
    title="Self-Rerank (Self-RAG simplified, after ActiveRAG)",
    summary="each top-k passage labelled useful/useless and relevant/irrelevant in one call, "
    "then the answer from the labels (Adaptive-Note's single-time baseline)",
    context=SingleStepContext,
    state=SelfRerankState,
    output=SelfRerankOutput,
    roles=("rerank", "answer"),
    prompts={"paper": prompts.PAPER, "official": prompts.OFFICIAL},
    wire=wiring(rerank),
    result_fields=("best_note", "labels"),
    trace_view="generic",
    progress={"labels": labels_line},
    official_code="adaptive-note",
)

build = SPEC.build
make_graph = server_graph(SPEC)  # langgraph.json
