"""Self-RAG (Asai et al., ICLR 2024): Self-Reflective Retrieval-Augmented Generation, the
short-form inference of the paper's QA evaluation (Algorithm 1; AkariAsai/self-rag
``retrieval_lm/run_short_form.py``, ``call_model_rerank_w_scores_batch``). It needs a
Self-RAG-trained model (selfrag/selfrag_llama2_7b or _13b) and the log-probabilities of its
reflection tokens:

    x = "### Instruction:\\n" + q + "\\n\\n### Response:\\n"
    adaptive: s = p([Retrieval]) / (p([Retrieval]) + p([No Retrieval]))    predict_retrieve
              at the first token of M(x); retrieve iff s > threshold         (mode: or always / never)
    if retrieve:
        D = Retriever(q)                                                     retrieve  (top_k passages)
        y_d = M(x + "[Retrieval]<paragraph>" + d + "</paragraph>")           generate  (each d, concurrently)
        score(y_d) = s_seq + w_rel s_rel + w_sup s_sup + w_use s_use         generate  (IsRel, IsSup, IsUse)
        y = y_d*,  d* = argmax_d score(y_d)  (ties: the first)               generate -> stop_check
    else:
        y = M(x + "[No Retrieval]")                                          generate -> stop_check
    answer = y without its reflection tokens                                 answer

No loop, so no max_steps: a run is one pass (stop_reason says which generation answered and
why). The scores and what they read are in nodes/self_rag.py; the prompt pieces, word for word,
in prompts/self_rag.py. One model makes every call (role ``generator``; stages
``retrieve_token`` and ``generate``).

Defaults. mode adaptive_retrieval, threshold 0.2 (the README's QA command; paper, Section 4.2:
"we set the retrieval threshold to 0.2 for most tasks"); w_rel = 1.0, w_sup = 1.0,
w_use = 0.5 (the paper's "1.0, 1.0 and 0.5"; the README's key parameters, "w_use (default
0.5)"; the scoring functions' own defaults); both scripts' argparse default for --w_use is 1.0,
so the README's QA command, which sets no weight, runs with 1.0, as FlashRAG's SelfRAGPipeline
does: ``w_use=1`` reproduces those runs; use_seqscore on
(the README's QA command passes --use_seqscore, and the paper's segment score is
p(y_t | x, d, y_<t) + S(Critique)); --use_groundness and --use_utility on (``w_sup=0`` /
``w_use=0`` switch them off). top_k = 5: ReSP (Jiang et al., 2024), the paper of ours that runs
FlashRAG's setup, uses the top-5 documents for every method (FlashRAG's retrieval_topk; Self-RAG
uses 5 for ARC and PubHealth, --ndocs 10 for PopQA). Greedy decoding (temperature 0, top_p 1)
and 100 new tokens per generation (--max_new_tokens 100): the original's SamplingParams.

Serving the model. Every call is one raw completion of the Self-RAG string; through an
OpenAI-compatible chat endpoint (langchain-openai's ChatOpenAI, as every noterag method calls
its model) the prompt is the one user message, so the server's chat template must pass it
through untouched. The Self-RAG checkpoints are Llama-2 fine-tunes on this raw format and ship
no chat template; serve them with vLLM and the pass-through template
``prompts.self_rag.RAW_CHAT_TEMPLATE`` (BOS, then the message, as ``LLM.generate`` tokenizes
the original's prompts)::

    vllm serve selfrag/selfrag_llama2_7b --dtype half --max-logprobs 20 \\
        --chat-template "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"
    noterag ask "..." --method self-rag --model openai:selfrag/selfrag_llama2_7b@http://127.0.0.1:8000/v1

Each call asks for ``logprobs`` with ``top_logprobs`` (20, OpenAI's and vLLM's default cap) and
sends vLLM's ``skip_special_tokens: false`` in ``extra_body`` (the README's SamplingParams set
it too): vLLM's default removes special tokens, the reflection tokens among them, from the
reply's text and its log-probability listing. A completions endpoint (``/v1/completions``)
would need no template, but noterag's models are chat models, and the template keeps the
prompt byte for byte. Where the original asks vLLM for the log-probabilities of 5,000 (32,016
for the decision) tokens at each position, an OpenAI-compatible endpoint lists the top 20: a
reflection token outside them counts with the original's value for an unlisted token,
exp(-100). A model that is not a Self-RAG model, or an endpoint that returns no
log-probabilities, stops the run with one error naming the method and the model
(nodes/self_rag.py).

Where FlashRAG (RUC-NLPIR/FlashRAG, flashrag/pipeline/active_pipeline.py, SelfRAGPipeline)
differs:
- instruction: "Answer the following question, give me a short answer.\\n\\n## Input:\\n\\n"
  before the question for datasets without a TASK_INST entry (its ``normal_qa``); the original
  and we use the question alone (the prompt override ``instruction`` gives FlashRAG's);
- passage: "<paragraph>{contents}</paragraph>", its corpus's contents field (title and text);
- weights: w_use = 1.0 (see Defaults); logprobs=5 for the per-passage generations (ours: the
  endpoint's top 20);
- the retrieval decision, the decision call's one token and the answer clean-up (reflection
  tokens, line breaks, a leading "#" or ":") are as here; it also adds a space after a sentence
  end glued to a word (``fix_spacing``), which we do not.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, Literal

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import PAPER, Profile
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.retrieve import retrieve
from noterag.nodes.self_rag import check_task, generate, predict, predict_retrieve, route
from noterag.prompts import self_rag as prompts

MODES = ("adaptive_retrieval", "always_retrieve", "no_retrieval")


@dataclass(kw_only=True)
class SelfRAGContext(RunContext):
    """Self-RAG's inference settings (run_short_form.py's arguments, the paper's defaults)."""

    # profile="original": the open-domain QA run as the authors' code runs it (AkariAsai/self-rag
    # @ 1fcdc42, README.md lines 247-254: run_short_form.py --mode MODE --threshold 0.2 --ndocs 10
    # --use_groundness --use_utility --use_seqscore, no weight given, so retrieval_lm/
    # run_short_form.py's argparse default --w_use 1.0, line 285); the decision is the same
    # probability ratio over the threshold (the default mode, adaptive_retrieval).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {"top_k": 10, "w_use": 1.0}

    task: Literal["multihop"] = field(
        default="multihop",
        metadata={
            "description": "Answer style: multihop only (short answers: the paper's short-form "
            "QA inference; its long-form segment search and closed-set scoring are not "
            "implemented). An input's `task` is checked likewise."
        },
    )
    mode: Literal["adaptive_retrieval", "always_retrieve", "no_retrieval"] = field(
        default="adaptive_retrieval",
        metadata={
            "description": "adaptive_retrieval: the model's Retrieve token decides against the "
            "threshold (one extra call); always_retrieve: retrieve for every question; "
            "no_retrieval: answer after [No Retrieval] (run_short_form.py --mode)."
        },
    )
    threshold: float = field(
        default=0.2,
        metadata={
            "description": "Adaptive retrieval: retrieve when p([Retrieval]) / (p([Retrieval]) + "
            "p([No Retrieval])) exceeds this (Self-RAG: 0.2).",
            "ge": 0,
            "le": 1,
        },
    )
    w_rel: float = field(
        default=1.0,
        metadata={
            "description": "Weight of the IsRel score ([Relevant]) in a segment's score.",
            "ge": 0,
            "le": 10,
        },
    )
    w_sup: float = field(
        default=1.0,
        metadata={
            "description": "Weight of the IsSup score ([Fully supported] 1, [Partially "
            "supported] 0.5) in a segment's score; 0: no support score.",
            "ge": 0,
            "le": 10,
        },
    )
    w_use: float = field(
        default=0.5,
        metadata={
            "description": "Weight of the IsUse score ([Utility:1..5] as -1 .. 1) in a segment's "
            "score; 0: no utility score (the paper: 0.5; run_short_form.py's default: 1.0).",
            "ge": 0,
            "le": 10,
        },
    )
    use_seqscore: bool = field(
        default=True,
        metadata={
            "description": "Add the generation's probability (exp of its mean token "
            "log-probability) to a segment's score (run_short_form.py --use_seqscore)."
        },
    )
    top_logprobs: int = field(
        default=20,
        metadata={
            "description": "Log-probabilities listed per token (OpenAI and vLLM allow 20 unless "
            "the server raises --max-logprobs); a reflection token outside them counts as "
            "exp(-100).",
            "ge": 1,
            "le": 20,
        },
    )
    skip_special_tokens: bool | None = field(
        default=False,
        metadata={
            "description": "vLLM's request field, sent in extra_body: false keeps the reflection "
            "tokens in the reply and its log-probabilities (needed); None: not sent (for an "
            "endpoint that refuses unknown fields and keeps special tokens itself)."
        },
    )
    temperature: float | None = field(
        default=None,
        metadata={
            "description": "Sampling temperature for every call (None: 0, the original's greedy "
            "decoding).",
            "ge": 0,
            "le": 2,
            "client": "sampling",
        },
    )
    max_tokens: int | None = field(
        default=None,
        metadata={
            "description": "New tokens per generation (None: 100, run_short_form.py "
            "--max_new_tokens for QA); the retrieval decision generates one.",
            "ge": 1,
            "le": 32_768,
            "client": "sampling",
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_task(self.task)
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")

    def sampling(self) -> dict[str, Any]:
        """The run's temperature and top_p; the token cap is set per call (one token for the
        retrieval decision, ``max_tokens`` for a generation)."""
        return {k: v for k, v in super().sampling().items() if k != "max_tokens"}


class SelfRAGOutput(CostFields, ChatFields, total=False):
    """What a Self-RAG run returns: the retrieval decision and the scored generations."""

    question: str
    answer: str
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str
    retrieved: bool  # the retrieval decision
    retrieve_score: float | None  # p([Retrieval]) normalised; None in the fixed modes
    # one per passage (or the one without retrieval): passage_id, title, text (with its
    # reflection tokens), answer, reflection, relevance, support, utility, sequence, score
    segments: list[dict[str, Any]]
    chosen: int | None  # the index of the answering segment


class SelfRAGState(SelfRAGOutput, total=False):
    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]
    # whether the decision call listed [Retrieval] / [No Retrieval] (None: no decision call)
    retrieval_token_listed: bool | None


def wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("predict_retrieve", node(predict_retrieve, deps))
    graph.add_node("retrieve", node(retrieve, deps))
    graph.add_node("generate", node(generate, deps))
    check = Decision(self_rag_stop, go_on="answer")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(predict, deps))
    graph.add_edge("question", "predict_retrieve")
    graph.add_conditional_edges("predict_retrieve", route, ["retrieve", "generate"])
    graph.add_edge("retrieve", "generate")
    graph.add_edge("generate", "stop_check")
    graph.add_edge("answer", END)


# --- progress lines (the CLI's and the trace page's) ---------------------------------------------

ACTION = "{{ 'retrieving' if retrieve else 'answering without retrieval' }}"
# the kept generation (chosen: its passage's index) has a score: it was generated with a passage
SCORED = "segments and segments[chosen or 0].get('score') is not none"
PROGRESS: Declared = {
    "retrieval_decision": (
        Line("mode {{ mode }}: " + ACTION, style="cyan", when="event.get('score') is none"),
        Line(
            "[Retrieval] {{ '%.2f' | format(score) }} {{ '>' if retrieve else '≤' }} "
            "threshold {{ '%g' | format(threshold) }}: " + ACTION,
            style="cyan",
            when="event.get('score') is not none",
        ),
    ),
    "segments": (
        Line("generated after [No Retrieval]", style="cyan", when="not (" + SCORED + ")"),
        Line(
            "scored {{ segments | length }} generations (one per passage); kept "
            "{% set best = segments[chosen or 0] %}"
            "passage {{ (chosen or 0) + 1 }} ({{ best.get('title') }}): score "
            "{{ '%.2f' | format(best.score) }} = sequence {{ '%.2f' | format(best.sequence) }} + "
            "relevance {{ '%.2f' | format(best.relevance) }}, support "
            "{{ '%.2f' | format(best.support) }}, utility {{ '%.2f' | format(best.utility) }} "
            "(weighted)",
            style="green",
            when=SCORED,
        ),
    ),
}


def self_rag_reply(stage: str, text: str) -> str:
    """How a Self-RAG model would reply with ``text``: the decision call retrieves; a
    generation carries its reflection tokens (relevant, fully supported, utility 5). The
    stand-in for the generic contract tests (MethodSpec.stand_in). The follow-up rewrite
    (``condense_question``) is no Self-RAG stage: a plain chat model's reply
    (``condense_question_model=``), as the text."""
    if stage == "condense_question":
        return text
    if stage == "retrieve_token":
        return "[Retrieval]"
    return f"[Relevant]{text}[Fully supported][Utility:5]"


def self_rag_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """Self-RAG (short form) makes one pass: after the generations, say how the answer was
    chosen (the retrieval decision, and the best-scored segment when it retrieved)."""
    segments, score = state.get("segments") or [], state.get("retrieve_score")
    if ctx.mode != "adaptive_retrieval":
        decision = f"mode {ctx.mode}"
    else:
        sign = ">" if state.get("retrieved") else "<="
        decision = f"[Retrieval] {score:.3g} {sign} threshold {ctx.threshold:g}"
    if not state.get("retrieved"):
        return f"single pass without retrieval ({decision}): the [No Retrieval] generation answers"
    if not any(s.get("passage_id") for s in segments):
        return (
            f"single pass: retrieval ({decision}) found no passage: the [No Retrieval] "
            "generation answers"
        )
    chosen = state.get("chosen") or 0
    scores = [s["score"] for s in segments]
    tied = sum(1 for s in scores if s == scores[chosen]) > 1
    why = (
        f"single pass with retrieval ({decision}): the generation for passage {chosen + 1} of "
        f"{len(segments)} scored best ({scores[chosen]:.3f})"
    )
    return why + ("; a tie: the first" if tied else "")


SPEC = MethodSpec(
    name="self-rag",
    title="Self-RAG (Asai et al., 2024)",
    summary="needs a Self-RAG-trained model with token log-probabilities: its Retrieve token "
    "decides whether to retrieve, one generation per passage is scored by its IsRel / IsSup / "
    "IsUse reflection tokens, the best answers (short-form inference)",
    context=SelfRAGContext,
    state=SelfRAGState,
    stops=(self_rag_stop,),
    output=SelfRAGOutput,
    roles=("generator",),
    stage_roles={"retrieve_token": "generator", "generate": "generator"},
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("retrieved", "retrieve_score", "segments", "chosen"),
    trace_view="generic",
    progress=PROGRESS,
    # the original's greedy decoding (its SamplingParams: temperature 0, top_p 1)
    paper_profile=replace(PAPER, sampling={"temperature": 0.0, "top_p": 1.0}),
    stand_in=self_rag_reply,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
