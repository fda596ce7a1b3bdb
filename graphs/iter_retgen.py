"""Iter-RetGen (Shao et al., 2023): iterative retrieval-generation synergy.

    for t = 1 .. T:
        D_t <- retrieve(q if t = 1 else q + " " + y_{t-1})   (top_k)   retrieve
        if t = T: break                                                stop_check (iter_retgen_stop)
        y_t <- LLM(demos, D_t, q)   (chain of thought)                 generate
    y_T <- LLM(demos, D_T, q);  answer <- "So the answer is X" in y_T   answer

T is the context field max_steps. The paper evaluates T = 1 .. 7 (Table 2; "the second
iteration giving the greatest boost") and compares costs at T = 2; ReSP's Table 2 reports
Iter-RetGen as FlashRAG runs it, with 3 iterations: the default is 3. Each iteration reads the 5
paragraphs its query retrieved (paper, Section 4.4: top-5; ReSP: 5 documents per retrieval),
not those of earlier iterations. The prompts are the paper's 3-shot demonstrations
(noterag.prompts.iter_retgen; ``demos`` picks the dataset's, HotpotQA by default).
Generation-augmented retrieval adaptation (Section 3.4: distilling the retriever with the
first generations) trains a component: it is not part of this method.

FlashRAG's IterativePipeline (RUC-NLPIR/FlashRAG ``flashrag/pipeline/active_pipeline.py``),
whose numbers ReSP reports, differs from the paper: it prompts with FlashRAG's generic
direct-answer template ("Answer the question based on the given document. Only give me the
answer and do not output any other words."), so each generation (at most 32 tokens in its
benchmark) is a short answer rather than a chain of thought, and its query is
``f"{question} {previous answer}"``; its iter_num is 3 and its answer is the last generation
as it is. ``profile="flashrag"`` sends that template (noterag.prompts.flashrag) with FlashRAG's
passage format and decoding, and answers with the last generation whole.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import MOST_STEPS, RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import Profile
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.iter_retgen import answer, generate
from noterag.nodes.retrieve import retrieve
from noterag.prompts import flashrag
from noterag.prompts import iter_retgen as prompts


@dataclass(kw_only=True)
class IterRetGenContext(RunContext):
    """Iter-RetGen's settings: T and the demonstrations."""

    max_steps: int = field(
        default=3,
        metadata={
            "description": "T: the retrieval-generation iterations; the T-th generation is the "
            "answer (ReSP's comparison, via FlashRAG: 3; the paper: 1 to 7, costs at 2).",
            "ge": 1,
            "le": MOST_STEPS,
        },
    )
    demos: Literal["hotpotqa", "2wikimultihopqa", "musique", "bamboogle"] = field(
        default="hotpotqa",
        metadata={
            "description": "Whose 3-shot demonstrations (the paper's Appendix B) multi-hop "
            "questions get; task strategyqa always gets StrategyQA's."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.demos not in prompts.DATASETS:
            raise ConfigError(
                f"demos must be one of {', '.join(prompts.DATASETS)}, not {self.demos!r}"
            )


class IterRetGenOutput(CostFields, ChatFields, total=False):
    """What an Iter-RetGen run returns: every iteration's generation, the last one's answer."""

    question: str
    answer: str
    generations: Annotated[list[str], operator.add]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int  # iterations run (generations written)
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class IterRetGenState(IterRetGenOutput, total=False):
    """The loop's working values: the next query and this iteration's paragraphs."""

    task: str
    queries: list[str]  # the question and the last generation (None: the question alone)
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    for step in (retrieve, generate, answer):
        graph.add_node(step.__name__, node(step, deps))
    check = Decision(iter_retgen_stop, go_on="generate")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "stop_check")
    graph.add_edge("generate", "retrieve")
    graph.add_edge("answer", END)


# The CLI's and the trace page's line for an iteration's generation: its last line of text.
PROGRESS: Declared = {
    "generation": Line(
        "generation {{ (step or 0) | int + 1 }}: "
        "{% for line in ((generation or '') | string).splitlines() if line.strip() %}"
        "{% if loop.last %}{{ line }}{% endif %}{% else %}(empty){% endfor %}",
        style="cyan",
    )
}


# The trace page: per iteration its query, the paragraphs it read, its generation (and, for the
# last one, the answer parsed from it).
TRACE_VIEW = """\
{% import "trace/_cards.html.j2" as card with context %}
{% for entry in trace %}
{% call card.section(entry.get("step"), entry, "Iteration %s" % ((entry.get("step") or 0) + 1)) %}
{{ card.row("Query", card.queries([entry.get("query") or ""])) }}
{{ card.row("Paragraphs", card.passage_list(entry.get("passage_ids") or [])) }}
{{ card.row("Generation", card.text(entry.get("generation"), "note")) }}
{% if entry.get("answer") is not none %}
{{ card.row("Answer", card.text(entry.get("answer"), "note")) }}
{% endif %}
{% endcall %}
{% endfor %}
"""


def iter_retgen_stop(
    state: Mapping[str, Any], ctx: Any, profile: Profile | None = None
) -> str | None:
    """Iter-RetGen, after each retrieval: the iteration that retrieved is the T-th (T =
    max_steps), so its generation is the answer."""
    if state.get("steps", 0) + 1 >= ctx.max_steps:
        return f"{ctx.max_steps} iteration(s) (max_steps = T = {ctx.max_steps})"
    return None


SPEC = MethodSpec(
    name="iter-retgen",
    title="Iter-RetGen (Shao et al., 2023)",
    summary="T iterations: retrieve with the question and the last generation, generate a chain "
    "of thought; the T-th generation's answer",
    context=IterRetGenContext,
    state=IterRetGenState,
    stops=(iter_retgen_stop,),
    output=IterRetGenOutput,
    roles=("generator",),
    stage_roles={"generate": "generator", "answer": "generator"},
    # flashrag: FlashRAG's IterativePipeline, whose numbers ReSP Table 2 reprints
    prompts={"paper": prompts.PAPER, "flashrag": flashrag.ITER_RETGEN},
    wire=wire,
    result_fields=("generations",),
    trace_view=TRACE_VIEW,
    progress=PROGRESS,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
