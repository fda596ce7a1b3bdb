"""Adaptive-RAG (Jeong et al., NAACL 2024): a query-complexity classifier routes each question to
the cheapest strategy that suffices.

    c <- classifier(q)   in {A, B, C}   (unreadable: fallback_class)          classify
    A (no retrieval):   answer <- LLM(q)                                      stop_check -> answer
    B (single-step):    P <- retrieve(q); answer <- LLM(q, P)  (vanilla RAG)  retrieve -> stop_check
                                                                               -> answer
    C (multi-step):     IRCoT: loop { P <- P + retrieve(query); s <- reason(P, q, CoT) }
                        until "answer is", an empty sentence or max_steps      ircot_retrieve -> reason
                                                                               -> stop_check (loop)
                        answer <- the concluding sentence, else the QA reader  -> answer

Each route runs another noterag method's steps, unchanged: ``no-retrieval`` (A), ``vanilla``
(B), ``ircot`` (C), with that method's prompts (noterag.prompts.adaptive_rag) and settings (the
context holds IRCoT's), so route C runs exactly as ``noterag ask --method ircot`` would, its calls
and tokens counted in this run's cost. The output says which class the classifier chose
(``complexity``), which method ran (``strategy``) and why it stopped (``stop_reason``, prefixed
with the class); the trace starts with the classifier's entry, then the method's own.

The steps are wired into this graph rather than run as subgraphs: a compiled subgraph's custom
events and message tokens do not reach the parent's ``stream()`` unless the caller asks for
``subgraphs=True`` (LangGraph filters them by namespace), so the progress lines and the streamed
answer, which every method must give from its ``answer`` step, would be lost.

The classifier (role ``classifier``) is pluggable. **A trained component is replaced by a
prompted one by default**: the authors train a T5-large on silver labels (the simplest strategy
that answered correctly) and dataset biases (single-hop datasets B, multi-hop C); noterag's
default asks the run's model with a prompt of ours (the paper's three classes). Any chat model
can be given (``build_graph("adaptive-rag", classifier_model=...)``), and so can any Runnable
that is not a chat model, or a plain function, e.g. the authors' classifier through
langchain-huggingface: it is wrapped (noterag.models.runnable.RunnableModel) and reads the
question alone, as the authors' does; its replies are parsed like the prompted model's.

Defaults: greedy decoding on every route (temperature 0: the authors' GPT3Generator, as
IRCoT's), route C's demonstrations the authors' (their repository's ``gold_with_1_distractors``
files: ``demo_files="adaptive-rag"``), top_k 5 for both retrieving routes and BM25 (Amber, which
compares against Adaptive-RAG, runs every baseline with the same BM25 retriever and top-k),
IRCoT's own settings for route C (max_steps 10, max_passages 15, HotpotQA's demonstrations;
graphs/ircot.py), task multihop only (IRCoT has no other answer prompt). The authors'
configurations retrieve 15 paragraphs for their single-step route and 6 per step for IRCoT
(``bm25_retrieval_count`` of ``oner_qa_*`` / ``ircot_qa_*`` as ``predict_complexity_on_
classification_results.py`` reads them; ``profile="original"``: ``single_step_top_k`` 15,
``top_k`` 6); they ran all three strategies on every question and picked each question's by
its class afterwards, which gives the same answers.

FlashRAG's AdaptivePipeline (``flashrag/pipeline/pipeline.py``) routes the same way with the
authors' classifier (``AdaptiveJudger``: the same argmax over A/B/C), to its own no-retrieval
prompt, its SequentialPipeline and its IRCOTPipeline with max_iter 5 (see graphs/ircot.py for
how that pipeline differs from the original IRCoT).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import setting
from noterag.core.decision import Decision, single_pass, stop_check
from noterag.core.profiles import Profile
from noterag.core.progress import Line, Part
from noterag.core.spec import Deps, MethodSpec, SearchScript
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.ircot import ENTRY_CARDS as IRCOT_CARDS
from noterag.graphs.ircot import GREEDY, IRCoTContext, ircot_stop
from noterag.graphs.ircot import PROGRESS as IRCOT_PROGRESS
from noterag.graphs.single_pass import single_pass_trace
from noterag.models.runnable import pluggable
from noterag.nodes import ircot
from noterag.nodes.adaptive_rag import answer, classify, on_route
from noterag.nodes.retrieve import retrieve
from noterag.prompts import adaptive_rag as prompts

COMPLEXITIES = tuple(prompts.STRATEGIES)


@dataclass(kw_only=True)
class AdaptiveRAGContext(IRCoTContext):
    """Adaptive-RAG's settings: the classifier's fallback, and IRCoT's settings for route C
    (max_steps, max_passages, demos, prompt_set, max_demos, prompt_tokens, qa_reader); top_k is
    every retrieval's."""

    # profile="original": route C as the authors ran it (starsuzi/Adaptive-RAG @ 0c88670,
    # classifier/postprocess/predict_complexity_on_classification_results.py, lines 17-22: the
    # runs "ircot_qa_<model>_<dataset>____prompt_set_1___bm25_retrieval_count__6___
    # distractor_count__1"; base_configs/ircot_qa_gpt_<dataset>.jsonnet: the reader answers after
    # every loop), with GPT3Generator's sampling (commaqa/models/gpt3generator.py: temperature
    # 0, top_p 1, max_tokens 300); route B retrieves 15 (lines 24-29, the runs "oner_qa_<model>_
    # <dataset>____prompt_set_1___bm25_retrieval_count__15___distractor_count__1").
    ORIGINAL: ClassVar[Mapping[str, Any]] = {
        "qa_reader": True,
        "top_k": 6,
        "single_step_top_k": 15,
        "top_p": 1.0,
        "max_tokens": 300,
    }

    task: Literal["multihop"] = field(
        default="multihop",
        metadata={
            "description": "Answer style: multihop (short answer) only, as IRCoT (route C) has no "
            "other answer prompt. The input's `task` overrides it."
        },
    )
    demo_files: Literal["ircot", "adaptive-rag"] = field(
        default="adaptive-rag",
        metadata={
            "description": "Route C's demonstration files: adaptive-rag, the authors' own "
            "gold_with_1_distractors files, which their runs read (starsuzi/Adaptive-RAG @ "
            "0c88670, the 'distractor_count__1' runs of classifier/postprocess/"
            "predict_complexity_on_classification_results.py); ircot, StonyBrookNLP/ircot's "
            "gold_with_2_distractors files (IRCoT's default)."
        },
    )
    single_step_top_k: int | None = setting(
        None,
        "Passages route B (single-step) retrieves; None: top_k, as route C's (the authors' "
        "single-step runs: 15; profile=original sets it).",
        ge=1,
        le=100,
    )
    fallback_class: Literal["A", "B", "C"] = field(
        default="B",
        metadata={
            "description": "The class a classifier reply that names none of A, B, C is routed "
            "as (a counted fallback): B, single-step, by default."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task != "multihop":
            raise ConfigError(f"adaptive-rag answers task multihop only, not {self.task!r}")
        if self.single_step_top_k is not None and self.single_step_top_k < 1:
            raise ConfigError(
                f"single_step_top_k must be at least 1 or None, not {self.single_step_top_k}"
            )
        if self.fallback_class not in COMPLEXITIES:
            raise ConfigError(
                f"fallback_class must be one of {', '.join(COMPLEXITIES)}, not {self.fallback_class!r}"
            )


class AdaptiveRAGOutput(CostFields, ChatFields, total=False):
    """What an Adaptive-RAG run returns: the class, the method that ran and that method's output."""

    question: str
    answer: str
    complexity: str  # A, B or C
    strategy: str  # the method the class routes to: no-retrieval, vanilla or ircot
    cot: list[str]  # route C: IRCoT's chain of thought
    passage_ids: Annotated[list[str], merge_unique]
    steps: int  # route C: IRCoT's reasoning steps
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class AdaptiveRAGState(AdaptiveRAGOutput, total=False):
    """The working values of every route (vanilla RAG's and IRCoT's)."""

    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]
    query: str
    new_passage_ids: list[str]
    concluded: str | None


# the first step of each route after the classifier
FIRST_STEP = {"no-retrieval": "stop_check", "vanilla": "retrieve", "ircot": "ircot_retrieve"}


def first_step(state: Mapping[str, Any]) -> str:
    return FIRST_STEP[state["strategy"]]


def single_pass_record(state: Mapping[str, Any]) -> dict[str, Any]:
    """Routes A and B record their one pass as the baselines do; IRCoT's steps record their own."""
    return {} if state.get("strategy") == "ircot" else single_pass_trace(state)


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    graph.add_node("classify", node(classify, deps))
    graph.add_node("retrieve", node(on_route(retrieve, "vanilla"), deps))
    graph.add_node("ircot_retrieve", node(on_route(ircot.retrieve, "ircot"), deps))
    graph.add_node("reason", node(on_route(ircot.reason, "ircot"), deps))
    check = Decision(adaptive_rag_stop, go_on="ircot_retrieve", record=single_pass_record)
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "classify")
    graph.add_conditional_edges("classify", first_step, list(FIRST_STEP.values()))
    graph.add_edge("retrieve", "stop_check")
    graph.add_edge("ircot_retrieve", "reason")
    graph.add_edge("reason", "stop_check")
    graph.add_edge("answer", END)


class AdaptiveRAGSpec(MethodSpec):
    """Adaptive-RAG's declaration: its ``classifier`` role also takes a Runnable that is not a
    chat model (or a function), wrapped by noterag.models.runnable.pluggable."""

    def bind(
        self,
        model: Any = None,
        retriever: Any = None,
        *,
        prompts: Mapping[str, Any] | None = None,
        **role_models: Any,
    ) -> Deps:
        if "classifier_model" in role_models:
            role_models["classifier_model"] = pluggable(role_models["classifier_model"])
        return super().bind(model, retriever, prompts=prompts, **role_models)


# The CLI's and the trace page's line for the classifier's decision (MethodSpec.progress).
COMPLEXITY = Line(
    "query complexity {{ complexity }}: {{ strategy }}",
    Part(" (unreadable classifier reply: the fallback class)", "yellow", when="fallback"),
    style="cyan",
)


# The trace page: the classifier's card, then the route's: IRCoT's reasoning steps and reader
# (graphs/ircot.py's cards), or the single pass's retrieval.
TRACE_VIEW = (
    """\
{% import "trace/_cards.html.j2" as card with context %}
{% for entry in trace %}
{% if entry.get("step") == "classify" %}
{% call card.section("classify", entry, "Query complexity") %}
{{ card.row("Class", card.text(entry.get("complexity") ~ " (" ~ entry.get("strategy") ~ ")")) }}
{{ card.row("Classifier reply", card.text(entry.get("reply"), "note")) }}
{% if entry.get("fallback") %}
{{ card.row("Fallback", card.muted("no class could be read from the reply: the fallback class")) }}
{% endif %}
{% endcall %}
{% elif entry.get("reader") or "sentence" in entry %}
"""
    + IRCOT_CARDS
    + """\
{% else %}
{% call card.section(entry.get("step"), entry, "Single pass") %}
{{ card.row("Query", card.queries(entry.get("queries") or [])) }}
{{ card.row("Passages", card.passage_list(entry.get("new_passage_ids") or [])) }}
{% endcall %}
{% endif %}
{% endfor %}
"""
)


def adaptive_rag_stop(
    state: Mapping[str, Any], ctx: Any, profile: Profile | None = None
) -> str | None:
    """Adaptive-RAG: routes A (no retrieval) and B (single-step) answer after their one pass;
    route C (multi-step) stops where IRCoT stops."""
    route = f"class {state.get('complexity')} ({state.get('strategy')})"
    if state.get("strategy") == "ircot":
        why = ircot_stop(state, ctx, profile)
        return f"{route}: {why}" if why else None
    return f"{route}: {single_pass(state, ctx, profile)}"


SPEC = AdaptiveRAGSpec(
    name="adaptive-rag",
    title="Adaptive-RAG (Jeong et al., 2024)",
    summary="a query-complexity classifier routes each question: A no retrieval, B single-step "
    "(vanilla RAG), C multi-step (IRCoT); the trained T5 classifier is replaced by a prompted "
    "LLM (ours) unless classifier_model= gives one",
    context=AdaptiveRAGContext,
    state=AdaptiveRAGState,
    stops=(adaptive_rag_stop,),
    output=AdaptiveRAGOutput,
    roles=("classifier", "reasoner", "answer"),
    stage_roles={"classify": "classifier", "reason": "reasoner"},
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("complexity", "strategy"),
    trace_view=TRACE_VIEW,
    progress={"complexity": COMPLEXITY, "thought": IRCOT_PROGRESS["thought"]},
    paper_profile=GREEDY,
    # a stand-in classifies the question multi-step (C): IRCoT searches for each reasoning
    # sentence until one says the answer
    search_script=SearchScript(
        {
            "classify": "C",
            "reason": ["The bridge was designed by an architect.", "So the answer is: 1871."],
        }
    ),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
