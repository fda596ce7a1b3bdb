"""RECOMP (Xu et al., ICLR 2024): retrieve, compress the retrieved passages, prepend the
compressed text to the answer prompt.

    P <- retrieve(q)                          (top_k)                           retrieve
    abstractive: s <- compressor(q, P)        (a summary)                       summarize
    extractive:  s <- top n sentences of P by sim(emb(q), emb(sentence))       extract
    (single pass)                                                               stop_check
    answer <- LLM(q, s)   (s empty: LLM(q), selective augmentation)            answer

The context field ``compression`` selects the compressor for a run. The compressed text fills the
``{refs}`` slot of vanilla RAG's answer prompt (noterag.prompts.recomp); an empty one sends the
no-retrieval prompt, as RECOMP prepends nothing then.

**Trained components are replaced by default.** RECOMP trains both compressors: the extractive
one is a Contriever fine-tuned to rank the sentences that help the LM answer, the abstractive one
a T5-large distilled from GPT-3.5 summaries. noterag's defaults: for extractive, the ``dense``
extra's all-MiniLM-L6-v2 sentence embeddings (``extractor_model=`` takes any langchain
``Embeddings``, e.g. a ``HuggingFaceEmbeddings`` of a trained compressor; without the extra and
without one, an extractive run is one clear error); for abstractive, the run's model prompted by
``summarize`` (ours) in RECOMP's input format (``compressor_model=`` takes another chat model, or
any Runnable that is not one, e.g. the authors' T5 through langchain-huggingface, which then
reads the training format itself: noterag.models.runnable).

Defaults are ReSP's (Table 2 compares against RECOMP with top-5 passages per retrieval, E5 dense
retrieval, Llama3-8B-instruct): ReSP follows FlashRAG, whose RECOMP row (HotpotQA 37.5, 2Wiki
32.4, the numbers ReSP reports) is RECOMP-abstractive with the authors' HotpotQA checkpoint
(``examples/methods/run_exp.py``, ``recomp``): compression abstractive, top_k 5. Extractive keeps
FlashRAG's ``refiner_topk``, 5 sentences. BM25 is noterag's default retriever.

Where FlashRAG differs: its generator keeps the reference slot when the refiner returns nothing
(an empty passages section) where RECOMP, and noterag, prepend nothing; its compressor input is
truncated to 1024 tokens and the summary to 512 (the model's limits apply here); its extractive
scores use E5 with query/passage prefixes.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal, cast

from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, StateGraph
from langgraph.runtime import get_runtime

from noterag.base.errors import ConfigError
from noterag.core.context import RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import Profile
from noterag.core.progress import Declared, Line, Part
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node, run_context
from noterag.graphs.assemble import builder, server_graph
from noterag.models.runnable import pluggable
from noterag.nodes.recomp import RecompDeps, answer, extract, retrieve, summarize
from noterag.nodes.single_step import check_task
from noterag.prompts import recomp as prompts

COMPRESSIONS = ("abstractive", "extractive")


@dataclass(kw_only=True)
class RecompContext(RunContext):
    """RECOMP's settings: which compressor, and how many sentences the extractive one keeps."""

    task: Literal["multihop", "asqa", "strategyqa"] = field(
        default="multihop",
        metadata={
            "description": "Answer style: multihop (short answer), asqa (long form), strategyqa "
            "(yes/no): vanilla RAG's answer prompts. The input's `task` overrides it."
        },
    )
    compression: Literal["abstractive", "extractive"] = field(
        default="abstractive",
        metadata={
            "description": "abstractive: a summary of the passages by the compressor model "
            "(ReSP's RECOMP, FlashRAG's RECOMP-abstractive); extractive: the passages' sentences "
            "most similar to the question by an embedding model."
        },
    )
    sentences: int = field(
        default=5,
        metadata={
            "description": "Extractive: the sentences kept (FlashRAG's refiner_topk, 5), in "
            "their passage order.",
            "ge": 1,
            "le": 100,
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_task(self.task, "recomp")
        if self.compression not in COMPRESSIONS:
            raise ConfigError(
                f"compression must be one of {', '.join(COMPRESSIONS)}, not {self.compression!r}"
            )


class RecompOutput(CostFields, ChatFields, total=False):
    """What a RECOMP run returns: the compressor used and the compressed text the answer read."""

    question: str
    answer: str
    compression: str  # abstractive or extractive
    compressed: str  # what the answer prompt read in place of the passages ("": nothing)
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class RecompState(RecompOutput, total=False):
    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    recomp_deps = deps if isinstance(deps, RecompDeps) else as_recomp_deps(deps, None)

    def compressor(state: Mapping[str, Any], config: RunnableConfig) -> str:
        # the run's settings, its configurable ones included, as every step reads them (no
        # runtime where update_state runs the route: then the defaults)
        given = getattr(get_runtime(deps.context_schema), "context", None)
        ctx: Any = run_context(deps.context_schema, given, config.get("configurable"))
        return "summarize" if ctx.compression == "abstractive" else "extract"

    graph.add_node("retrieve", node(retrieve, deps))
    graph.add_node("summarize", node(summarize, deps))
    graph.add_node("extract", cast(Any, extract(recomp_deps)))
    check = Decision(recomp_stop, go_on="answer")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "retrieve")
    # the compressor the run's settings name (LangGraph hands the route its config and runtime)
    graph.add_conditional_edges("retrieve", compressor, ["summarize", "extract"])
    graph.add_edge("summarize", "stop_check")
    graph.add_edge("extract", "stop_check")
    graph.add_edge("answer", END)


def as_recomp_deps(deps: Deps, extractor: Embeddings | None) -> RecompDeps:
    return RecompDeps(**{f.name: getattr(deps, f.name) for f in fields(deps)}, extractor=extractor)


class RecompSpec(MethodSpec):
    """RECOMP's declaration: its ``compressor`` role also takes a Runnable that is not a chat
    model (noterag.models.runnable.pluggable), and its ``extractor`` role an embedding model."""

    def bind(
        self,
        model: Any = None,
        retriever: Any = None,
        *,
        prompts: Mapping[str, Any] | None = None,
        **role_models: Any,
    ) -> Deps:
        extractor = role_models.pop("extractor_model", None)
        if extractor is not None and not isinstance(extractor, Embeddings):
            raise ConfigError(
                "recomp's extractor_model must be a langchain Embeddings (e.g. "
                f"HuggingFaceEmbeddings), not {type(extractor).__name__}"
            )
        if "compressor_model" in role_models:
            role_models["compressor_model"] = pluggable(role_models["compressor_model"])
        deps = super().bind(model, retriever, prompts=prompts, **role_models)
        return as_recomp_deps(deps, extractor)


# The CLI's and the trace page's line for the compression (MethodSpec.progress).
PROGRESS: Declared = {
    "compressed": Line(
        "{{ compression }} compression: {{ passages }} passage(s), {{ passage_words }} words -> "
        "{{ compressed_words or 0 }} words",
        Part(" (nothing kept: answering without passages)", "yellow", when="not compressed_words"),
        style="cyan",
    )
}


# The trace page: the retrieval, then what the compressor made of it.
TRACE_VIEW = """\
{% import "trace/_cards.html.j2" as card with context %}
{% for entry in trace %}
{% call card.section(entry.get("step"), entry, "Retrieval and " ~ entry.get("compression") ~ " compression") %}
{{ card.row("Query", card.queries(entry.get("queries") or [])) }}
{{ card.row("Passages", card.passage_list(entry.get("new_passage_ids") or [])) }}
{{ card.row("Words", card.text(entry.get("passage_words") ~ " -> " ~ entry.get("compressed_words"))) }}
{% if entry.get("compressed") %}
{{ card.row("Compressed", card.text(entry.get("compressed"), "note")) }}
{% else %}
{{ card.row("Compressed", card.muted("nothing: answered without passages")) }}
{% endif %}
{% endcall %}
{% endfor %}
"""


def recomp_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """RECOMP has no loop: it answers once the retrieved passages are compressed, without them
    when the compression kept nothing (its selective augmentation)."""
    mode, passages = state.get("compression"), len(state.get("passage_ids") or [])
    if not (state.get("compressed") or "").strip():
        return (
            f"single pass: the {mode} compression of {passages} passage(s) kept nothing, "
            "answered without them (selective augmentation)"
        )
    return f"single pass: {passages} passage(s) compressed ({mode})"


SPEC = RecompSpec(
    name="recomp",
    title="RECOMP (Xu et al., 2024)",
    summary="the retrieved passages compressed before the answer prompt, abstractive (a summary) "
    "or extractive (top sentences); the trained compressors are replaced by a prompted LLM "
    "(ours) and MiniLM sentence embeddings unless compressor_model= / extractor_model= give them",
    context=RecompContext,
    state=RecompState,
    stops=(recomp_stop,),
    output=RecompOutput,
    roles=("compressor", "extractor", "answer"),
    stage_roles={"summarize": "compressor"},
    prompts={"paper": prompts.PAPER},
    wire=wire,
    result_fields=("compression", "compressed"),
    trace_view=TRACE_VIEW,
    progress=PROGRESS,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
