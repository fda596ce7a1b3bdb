"""FLARE (Jiang et al., 2023): forward-looking active retrieval augmented generation (FLARE_direct).

    D <- retrieve(x); D_e <- retrieve(question of e) for each exemplar e        retrieve
    y <- ""
    loop, t = 0, 1, ...:
        ŝ_t <- first sentence of LM(exemplars + D_e, D, x, y)  (look_ahead_tokens)   look_ahead
        if every token of ŝ_t has probability > θ: s_t <- ŝ_t                       look_ahead
        else:
            q_t <- ŝ_t with its tokens of probability <= β masked                  look_ahead
                   (query="questions": a question per low-confidence term)
            D <- retrieve(q_t)                                                      retrieve
            s_t <- first sentence of LM(exemplars + D_e, D, x, y)                   regenerate
        y <- y + " " + s_t
        if the LM ended its answer after s_t, or |y| >= max_length tokens,
           or t + 1 >= max_steps: break                            stop_check (flare_stop)
    answer <- "answer is X" in y (multihop, strategyqa), y (asqa)                  answer

As the authors' code runs it (jzbjyb/FLARE at ec4b06b, ``src/openai_api.py``
``QueryAgent.ret_prompt`` with ``configs/2wikihop_flare_config.json``; the steps in
noterag.nodes.flare): the exemplars are the original's (noterag.prompts.flare: 2WikiMultihopQA's
8 for multihop, StrategyQA's 6, ASQA's 8), each shown under the passages retrieved for its
question; the test input under the current passages, "Search results ranked based on relevance
in descending order:" then "[i]: <text>" lines; every call generates at most 64 tokens, and no
more than is left of the 256 (the original's continuation asks for min(max_generation_len -
generated, 64)), stops at a blank line and keeps its first sentence; retrieval replaces the
passages. The original calls
the LM again after a confident look-ahead, with the same prompt (same passages), at temperature
0: the same sentence, so noterag accepts the look-ahead as the paper describes ("accept it
without retrieving"), one call fewer.

Defaults. θ = 0.8 (``threshold``, the original's look_ahead_filter_prob), β = 0.4
(``mask_threshold``, look_ahead_mask_prob), look-ahead 64 tokens (look_ahead_steps), 256 tokens
in all (max_generation_len): the authors' FLARE configuration for 2WikiMultihopQA, the one they
publish; temperature 0 (openai.sh). The papers that compare against FLARE state none of these:
Adaptive-Note, DeepNote and Amber only name it; ReSP runs FlashRAG's pipeline (below). top_k 5:
those papers run every method with 5 passages per retrieval (the original: 2). max_steps 10
sentences: the original's loop ends at 256 tokens only; noterag also caps the sentences (and so
the calls) of a model that writes short ones. The exemplars' passages: ``demo_top_k`` (None: as
many as ``top_k``, the original's one ``topk``; 0: none). ``profile="original"`` sets the
original's top_k 2 and lifts the sentence cap (``FlareContext.ORIGINAL``).

Where noterag differs from the original: sentences are cut by a rule instead of NLTK's Punkt
(noterag.nodes.flare); the queries are not cut to 64 GPT-2 tokens (max_query_length: a
look-ahead sentence is at most 64 tokens anyway); the explicit-query variant keeps the
low-confidence terms as the rule finds them (the original has gpt-3.5-turbo widen each to its
constituent first); an empty masked query accepts the look-ahead (the original retrieves
nothing and generates the same sentence again); the text is a chat model's reply to the whole
prompt, each reply joined after a space (the original's path for gpt-3.5-turbo).

FlashRAG's FLAREPipeline (RUC-NLPIR/FlashRAG ``flashrag/pipeline/active_pipeline.py``), which
produced the FLARE numbers ReSP reports, differs: no retrieval with the input at first (the
first look-ahead reads no passage); one threshold, 0.2, both to trigger retrieval (all tokens
> 0.2 or retrieve) and to mask (tokens <= 0.2 dropped from the query); its prompt is its own
template with the question and the text so far, no exemplars; its stop list is every single
character of "!@#$%^&*()\\n\\n)(*&^%$#@!" (so a "(" or a newline ends each generation); a
sentence ends at "." or "?" after a non-capital and a space; the passages are shown only to the
regeneration, each step's retrieval read once; max_iter_num 5 steps and 256 tokens; the
answer is the whole generation.

FLARE needs the token log-probabilities of its model's replies (OpenAI, vLLM and llama.cpp's
server return them through the OpenAI-compatible API); a model that returns none stops the run
with one clear error. ``retrievals`` counts the retrievals the look-ahead triggered (the first
one, with the input, is not counted): with ``steps``, FLARE's retrieval rate per question.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import RunContext, setting
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import PAPER, Profile
from noterag.core.progress import Declared, Line, Part
from noterag.core.spec import Deps, MethodSpec, SearchScript
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.flare import answer, look_ahead, regenerate, retrieve
from noterag.prompts import flare as prompts

QUERIES = ("masked", "questions")


@dataclass(kw_only=True)
class FlareContext(RunContext):
    """FLARE's settings: the authors' 2WikiMultihopQA configuration (θ 0.8, β 0.4, 64-token
    look-ahead, 256 tokens), top-5 passages (the comparing papers), temperature 0."""

    # profile="original": the authors' own top-k (jzbjyb/FLARE @ ec4b06b,
    # configs/2wikihop_flare_config.json: "topk": 2, for the input's and the exemplars'
    # retrievals alike) and no sentence cap (src/openai_api.py, QueryAgent.ret_prompt:
    # max_iteration 10000, the loop ends at max_generation_len).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {"top_k": 2, "max_steps": 10_000}

    threshold: float = setting(
        0.8,
        "θ: a look-ahead sentence with a token of probability at most θ triggers retrieval "
        "(the original's look_ahead_filter_prob, 0.8).",
        ge=0,
        le=1,
    )
    mask_threshold: float = setting(
        0.4,
        "β: the implicit query is the look-ahead sentence without its tokens of probability at "
        "most β (the original's look_ahead_mask_prob, 0.4); with query=questions, those tokens "
        "are the terms questions are asked about.",
        ge=0,
        le=1,
    )
    query: Literal["masked", "questions"] = setting(
        "masked",
        "masked: the look-ahead with its low-confidence tokens masked (implicit query, the "
        "paper's default); questions: one generated question per low-confidence term "
        "(explicit query; role questioner).",
    )
    look_ahead_tokens: int = setting(
        64,
        "Tokens generated per call, of which the first sentence is kept (look_ahead_steps); no "
        "more than what is left of max_length.",
        ge=1,
        le=1024,
    )
    max_length: int = setting(
        256,
        "Stop once the answer has this many tokens (the original's max_generation_len).",
        ge=1,
        le=8192,
    )
    max_steps: int = setting(
        10,
        "The most sentences (steps); the answer is read from what was generated by then (the "
        "original stops at max_length only).",
        ge=1,
        # the original's loop cap (profile=original): every step generates at least one token,
        # so max_length (at most 8,192) bounds the steps too
        le=10_000,
    )
    max_demos: int | None = setting(
        None,
        "Exemplars shown at most, the first ones (None: the original's few-shot count, 8 for "
        "multihop and asqa, 6 for strategyqa).",
        ge=0,
        le=100,
    )
    demo_top_k: int | None = setting(
        None,
        "Passages shown with each exemplar, retrieved for its question from the same index as "
        "the original does (None: top_k, the original's one topk; 0: none).",
        ge=0,
        le=100,
    )
    temperature: float | None = setting(
        None,
        "Sampling temperature for every call (None: 0, the original's).",
        ge=0,
        le=2,
        client="sampling",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.query not in QUERIES:
            raise ConfigError(f"query must be one of {', '.join(QUERIES)}, not {self.query!r}")


class FlareOutput(CostFields, ChatFields, total=False):
    """What a FLARE run returns: the generation sentence by sentence, and how often it
    retrieved."""

    question: str
    answer: str
    generation: str  # y: the accepted sentences joined
    sentences: list[str]
    retrievals: int  # retrievals the look-ahead triggered (the first, with x, not counted)
    steps: int  # sentences accepted
    query_log: Annotated[list[str], operator.add]  # every retrieval's queries, x first
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class FlareState(FlareOutput, total=False):
    """The loop's working values."""

    task: str
    passages: list[Passage]  # D: the last retrieval's passages
    demo_passages: list[list[str]]  # D_e: each exemplar's passages' texts
    pending: dict[str, Any] | None  # the low-confidence look-ahead waiting for regenerate
    tokens: int  # tokens generated so far
    finished: str | None  # why the answer is complete, once it is


def after_look_ahead(state: Mapping[str, Any]) -> str:
    return "retrieve" if state.get("pending") else "stop_check"


def after_retrieve(state: Mapping[str, Any]) -> str:
    return "regenerate" if state.get("pending") else "look_ahead"


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    for step in (retrieve, look_ahead, regenerate, answer):
        graph.add_node(step.__name__, node(step, deps))
    check = Decision(flare_stop, go_on="look_ahead")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "retrieve")
    graph.add_conditional_edges("retrieve", after_retrieve, ["look_ahead", "regenerate"])
    graph.add_conditional_edges("look_ahead", after_look_ahead, ["retrieve", "stop_check"])
    graph.add_edge("regenerate", "stop_check")
    graph.add_edge("answer", END)


# --- progress lines (the CLI's and the trace page's) ---------------------------------------------

PROGRESS: Declared = {
    "passages": Line(
        "retrieved {{ passages | length }} passage(s) for "
        "{{ 'the question' if initial else \"the look-ahead's query\" }}",
        Part(": {{ passages | titles }}", when="passages"),
        style="cyan",
    ),
    "look_ahead": (
        Line(
            "{% if queries %}low confidence "
            "({{ low_confidence | map('trim') | map('repr') | join(', ') }}): "
            "{% else %}confident: {% endif %}{{ look_ahead or '(no sentence)' }}",
            style="{{ 'yellow' if queries else 'green' }}",
        ),
        # each query it searched with, on a line of its own under the sentence
        Line(
            Part("    query: ", "cyan"), "{{ item }}", style="yellow", each="queries", follows=True
        ),
    ),
    "sentence": Line("regenerated: {{ sentence or '' }}", style="cyan"),
}


# The trace page: per step the look-ahead, its confidence, the query and passages when it
# retrieved, and the sentence kept.
TRACE_VIEW = """\
{% import "trace/_cards.html.j2" as card with context %}
{% for entry in trace %}
{% call card.section(entry.get("step"), entry) %}
{{ card.row("Look-ahead", card.text(entry.get("look_ahead"), "note")) }}
{{ card.row("Lowest probability", card.text(entry.get("min_prob"))) }}
{{ card.row("Low-confidence tokens", card.queries(entry.get("low_confidence") or [])) }}
{{ card.row("Retrieved", card.verdict("retrieval", entry.get("retrieved"))) }}
{% if entry.get("retrieved") %}
{{ card.row("Query", card.queries(entry.get("queries") or [])) }}
{{ card.row("New passages", card.passage_list(entry.get("new_passage_ids") or [])) }}
{% endif %}
{{ card.row("Sentence", card.text(entry.get("sentence"), "note")) }}
{% endcall %}
{% endfor %}
"""


def flare_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """FLARE, after each accepted sentence: the generator ended its answer (it stopped by
    itself after the sentence, or wrote none), max_length tokens were generated (the
    original's max_generation_len), or max_steps sentences."""
    steps, tokens = state.get("steps", 0), state.get("tokens", 0)
    if why := state.get("finished"):
        return f"{why} at step {steps - 1}"
    if tokens >= ctx.max_length:
        return f"{tokens} tokens generated (max_length = {ctx.max_length})"
    if steps >= ctx.max_steps:
        return f"{steps} sentence(s) (max_steps = {ctx.max_steps})"
    return None


def flare_calls(ctx: Any) -> int:
    """The most calls of a run: per sentence the look-ahead, a question per low-confidence
    term (a term is at least one of the look-ahead's at most look_ahead_tokens tokens) and the
    regeneration; at most max_steps sentences, each at least one of max_length tokens."""
    return min(ctx.max_steps, ctx.max_length) * (2 + ctx.look_ahead_tokens)


SPEC = MethodSpec(
    name="flare",
    title="FLARE (Jiang et al., 2023)",
    summary="active retrieval: each next sentence is generated ahead; a token of probability at "
    "most θ triggers retrieval with the sentence's confident tokens, and the sentence is "
    "generated again (needs token log-probabilities)",
    context=FlareContext,
    state=FlareState,
    stops=(flare_stop,),
    queries="query_log",
    output=FlareOutput,
    roles=("generator", "questioner"),
    stage_roles={
        "look_ahead": "generator",
        "regenerate": "generator",
        "ask_question": "questioner",
    },
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("retrievals", "generation"),
    trace_view=TRACE_VIEW,
    progress=PROGRESS,
    # the original's temperature (openai.sh: temperature=0)
    paper_profile=replace(PAPER, sampling={"temperature": 0.0}),
    # a stand-in's tokens are all certain: at θ = 1 each look-ahead still triggers retrieval
    search_script=SearchScript(settings={"threshold": 1.0}),
    calls=flare_calls,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
