"""The single-step baselines' shape (DeepNote's "Single-Step RAG", Adaptive-Note's "Single-time
RAG"): one retrieval, one call that processes the passages, then the answer from that call's
reply. Chain-of-Note, Self-Refine and Self-Rerank are this shape with different processing
calls (graphs/chain_of_note.py, self_refine.py, self_rerank.py); this module declares no method.

    P = retrieve(q)                                retrieve    (top_k passages for the question)
    R = LLM(prompt_method(q, P))                   <the method's step>
    (single pass)                                  stop_check  (decision.single_pass)
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
from (and all note methods share). Tasks: multihop, asqa, strategyqa (noterag.prompts.single_step;
strategyqa answers with DeepNote's StrategyQA prompt, the one Adaptive-Note borrows); task
"crud" is refused before any call, as the authors' CRUD runs used Chinese prompt files noterag
does not ship.

What the three share beyond the shape (``declare`` writes it into each one's MethodSpec):

* Prompts: the processing call's is the authors' file thunlp/Adaptive-Note ``prompts/en/<file>``
  (byte for byte, rendered with ``str.format``), the answer's Adaptive-Note's own answer
  prompts, which the paper aligns across every method (noterag.prompts.<method>). The official
  code does not run these baselines (its ``--method`` is note, base or base_wo_retri), nor does
  ActiveRAG's, after which Self-Refine and Self-Rerank are named (OpenMatch/ActiveRAG @ 9cc79cc,
  src/prompt.py has only its own agents' prompts); so how they run is read from the files and
  the papers.
* Defaults are the papers': top-k 5, BM25 (the default index).
* ``profile="official"``: the Adaptive-Note code's conventions around the same files (passages
  as "Passage #i Title: ...", sampling 0.1 / 0.9 / 1280 tokens, the official ``gen_answer``
  files).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Annotated, Any, Literal

from langgraph.graph import END, StateGraph

from noterag.core.context import RunContext
from noterag.core.decision import Decision, single_pass, stop_check
from noterag.core.progress import Declared
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.nodes.answer import answer
from noterag.nodes.retrieve import retrieve
from noterag.nodes.single_step import check_task


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
        check = Decision(single_pass, go_on="answer")
        graph.add_node("stop_check", stop_check(check, deps))
        graph.add_conditional_edges("stop_check", check.route, check.routes)
        graph.add_node("answer", node(answer, deps))
        graph.add_edge("question", "retrieve")
        graph.add_edge("retrieve", name)
        graph.add_edge(name, "stop_check")
        graph.add_edge("answer", END)

    return wire


def declare(
    *,
    name: str,
    title: str,
    summary: str,
    step: Callable[..., Any],
    role: str,
    prompts: ModuleType,
    progress: Declared,
    state: type = SingleStepState,
    output: type = SingleStepOutput,
    result_fields: tuple[str, ...] = (),
) -> MethodSpec:
    """A single-step baseline's ``MethodSpec``: what the three share (settings, schemas, this
    wiring around ``step``, the reply kept as ``best_note``, the generic trace view, the
    Adaptive-Note code as the official one, its prompt module's PAPER and OFFICIAL sets), with
    the method's own name, step, model role (the step's stage; the answer's is "answer"), state
    and output where it returns more, and progress lines."""
    return MethodSpec(
        name=name,
        title=title,
        summary=summary,
        context=SingleStepContext,
        state=state,
        stops=(single_pass,),
        output=output,
        roles=(role, "answer"),
        prompts={"paper": prompts.PAPER, "official": prompts.OFFICIAL},
        wire=wiring(step),
        result_fields=("best_note", *result_fields),
        trace_view="generic",
        progress=progress,
        official_code="adaptive-note",
    )
