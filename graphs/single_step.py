"""The single-step baselines' shape (DeepNote's "Single-Step RAG", Adaptive-Note's "Single-time
RAG"): one retrieval, one call that processes the passages, then the answer from that call's
reply. Chain-of-Note, Self-Refine and Self-Rerank are this shape with different processing
calls (graphs/chain_of_note.py, self_refine.py, self_rerank.py); this module declares no method.

    P = retrieve(q)                                retrieve    (top_k passages for the question)
    R = LLM(prompt_method(q, P))                   <the method's step>
    (single pass)                                  stop_check  (nodes.stops.single_pass)
    answer = LLM(prompt_g(q, R))                   answer      (Adaptive-Note's generator, R as the note)

The generator reads the reply R and not the passages. The papers run every method with the
same generator prompt ("we align the prompts for generation within the same dataset",
Adaptive-Note), whose slot is a note, and describe these baselines as processing the retrieved
knowledge before generating (DeepNote: "additional processing of the retrieved knowledge, such
as summarization, based on Vanilla RAG"; Adaptive-Note: their weakness is "the risk of
discarding valuable information"). Their scores agree: Self-Rerank, whose reply keeps little of
the passages' text, scores on ASQA as no retrieval does (Adaptive-Note Table 1: 35.0 vs 35.5
str-em, vanilla 43.4). FlashRAG has none of the three; its SequentialPipeline with a refiner
has the same shape (the refiner's output replaces the passages in the generator's prompt).

The reply is kept in ``best_note``, the key the shared answer step fills the ``{note}`` slot
from (and all note methods share). Tasks: multihop, asqa, strategyqa (noterag.prompts.single_step);
task "crud" is refused before any call, as the authors' CRUD runs used Chinese prompt files
noterag does not ship.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langgraph.graph import END, StateGraph

from noterag.context import RunContext
from noterag.nodes.answer import answer
from noterag.nodes.retrieve import retrieve
from noterag.nodes.single_step import check_task
from noterag.nodes.step import node
from noterag.nodes.stops import single_pass, stop_check
from noterag.spec import Deps
from noterag.state import ChatFields, CostFields, Passage, merge_unique


@dataclass(kw_only=True)
class SingleStepContext(RunContext):
    """The shared settings (top_k 5, the papers' setting; BM25 is the default retriever), with
    the tasks these baselines have prompts for."""

    task: Literal["multihop", "asqa", "strategyqa"] = field(
        default="multihop",
        metadata={
            "description": "Answer style: multihop (short answer), asqa (long form), strategyqa "
            "(yes/no). The input's `task` overrides it. (No crud: the authors ran it with Chinese "
            "prompt files.)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_task(self.task, "this method")


class SingleStepOutput(CostFields, ChatFields, total=False):
    """What a single-step baseline returns: the answer and the reply it was generated from."""

    question: str
    answer: str
    best_note: str  # the processing call's reply: what the generator read as its note
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class SingleStepState(SingleStepOutput, total=False):
    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]


def wiring(step: Callable[..., Any]) -> Callable[[StateGraph, Deps], None]:
    """A ``MethodSpec.wire``: retrieve, ``step`` (the method's processing call), the single-pass
    stop, the answer."""

    def wire(graph: StateGraph, deps: Deps) -> None:
        name = step.__name__
        graph.add_node("retrieve", node(retrieve, deps))
        graph.add_node(name, node(step, deps))
        graph.add_node(
            "stop_check",
            stop_check(single_pass, deps, go_on="answer"),
            destinations=("answer",),
        )
        graph.add_node("answer", node(answer, deps))
        graph.add_edge("question", "retrieve")
        graph.add_edge("retrieve", name)
        graph.add_edge(name, "stop_check")
        graph.add_edge("answer", END)

    return wire
