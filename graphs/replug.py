"""REPLUG (Shi et al., 2024): retrieval-augmented black-box language models.

    D' = {d_1 .. d_k}, s(d, x) <- Retriever(x)                       retrieve   (top_k, with scores)
    (single pass)                                                    stop_check (single_pass)
    a_d <- LM(d ∘ x), p_d = p(a_d | d ∘ x)  for each d, concurrently  answer     (stage generate)
    λ(d, x) = exp s(d, x) / Σ_{d'} exp s(d', x)                       answer
    answer = argmax_a Σ_{d: a_d = a} λ(d, x) · p_d                    answer

No loop, so no max_steps. The prompts are the authors' QA code's (prompts/replug.py); the
passes and the ensemble in detail are in nodes/replug.py.

Ensembling at the level of whole answers, not of tokens, and why. The paper's Eq. 1 mixes the
per-passage output distributions; for its language-modelling experiments that is the next-token
distribution. For open-domain QA the authors' own code (downstream_eval/qa_final.py) ensembles
answers: each pass answers greedily, its answer's probability is the exp of its mean token
log-probability, identical answers add up their weighted probabilities, the best wins. noterag
does the same, for three reasons: it is what produced REPLUG's QA numbers; token-level
ensembling needs, at every step, each pass's full next-token distribution and a way to continue
every pass with the chosen token, and an OpenAI-compatible chat endpoint gives at most the top
20 log-probabilities and cannot continue a partial assistant reply (appending the token to the
prompt is not the same prefix); and it would cost one call per passage per answer token (k x
~10 calls), where answer-level costs k.

Defaults. top_k 5: ReSP (Table 2), the paper of ours that compares against REPLUG, runs every
method with the top-5 documents (the original: 10, ``--n_docs``). Temperature 0 (the original's
``temp=0``), at most 10 tokens per pass (``--maxlen 10``), a newline ends a pass. No few-shot
demonstrations unless the run names a dataset file to take them from (``demos_file``,
``max_demos``): the original shows the first 16 questions of its QA data file, each with its
top-1 document, and its repository holds neither. ``profile="original"`` sets top_k 10 and
max_demos 16, and so needs ``demos_file``.

Where noterag differs from the original: the authors' demonstration files are not shipped (the
run gives its own); a test question that is one of the demonstrations is answered (the original
skips it); no passage retrieved: one closed-book pass answers (the original always has
passages). The weights are
the softmax of whatever the retriever scores: a dense retriever's similarities (Contriever in
the paper) give smooth weights, BM25's larger scores give weights close to the top passage's
alone (its score minus the next one's, in nats).

FlashRAG's REPLUGPipeline (RUC-NLPIR/FlashRAG ``flashrag/pipeline/branching_pipeline.py`` with
``replug_utils.py``, from fastRAG), which produced the numbers ReSP reports, ensembles at the
token level inside a local Hugging Face model: at every step the passes' logits (not their
probabilities) are mixed with the scores normalised by their sum (not a softmax), and the next
token is sampled from the softmax of the mixture (``torch.multinomial``), the same token for
every pass; its prompt is its own template ("Document(Title: ...): ..." per pass).

REPLUG needs the token log-probabilities of its model's replies (OpenAI, vLLM and llama.cpp's
server return them through the OpenAI-compatible API) and the retriever's scores
(``Document.metadata["score"]``, as noterag's retrievers give them); without either the run
stops with one clear error.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import RunContext, setting
from noterag.core.decision import Decision, single_pass, stop_check
from noterag.core.profiles import PAPER
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes import replug as steps
from noterag.prompts import replug as prompts


@dataclass(kw_only=True)
class REPLUGContext(RunContext):
    """REPLUG's settings: top-5 passages (ReSP, Table 2), temperature 0 (the original)."""

    # profile="original": the authors' QA runs (swj0419/REPLUG @ 6cbe797): 10 passages (the
    # README's QA command sets no --n_docs: downstream_eval/argument.py's default, line 41) and
    # 16 demonstrations (downstream_eval/qa_final.py, main(): data["demos"][:16]), which need
    # the run's demos_file (the authors' data files are not in their repository).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {"top_k": 10, "max_demos": 16}

    # A file of the machine that runs the graph, read into every prompt: on a server, the
    # operator's (a client may name it only where prompt overrides are allowed).
    demos_file: str | None = setting(
        None,
        "A dataset file (any format `noterag eval` reads, e.g. the train split) whose first "
        "max_demos questions are shown before every pass, each with its top-1 passage and first "
        "answer, as the original shows its QA data file's demos. None: no demonstrations.",
        client="prompts",
    )
    max_demos: int = setting(
        0,
        "Demonstrations shown, the first of demos_file (the original: 16; profile=original sets "
        "16, which needs demos_file). 0: none.",
        ge=0,
        le=64,
    )

    temperature: float | None = field(
        default=None,
        metadata={
            "description": "Sampling temperature for every pass (None: 0, the original's "
            "greedy answers).",
            "ge": 0,
            "le": 2,
            "client": "sampling",
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_demos and not self.demos_file:
            raise ConfigError(
                f"replug shows max_demos={self.max_demos} demonstrations from a dataset file, and "
                "none was given: set demos_file=<dataset file> (the original took the first 16 "
                "questions of its NQ / TriviaQA data file), or max_demos=0"
            )


class REPLUGOutput(CostFields, ChatFields, total=False):
    """What a REPLUG run returns: each pass's answer and probability, the passages' weights and
    the ensemble, in passage order (the ensemble best first)."""

    question: str
    answer: str
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str
    scores: list[float]  # s(d, x), the retriever's
    weights: list[float]  # λ(d, x)
    passage_answers: list[str]  # a_d
    passage_probs: list[float]  # p(a_d | d ∘ x)
    ensemble: list[dict[str, Any]]  # {answer, probability, passes}, best first


class REPLUGState(REPLUGOutput, total=False):
    task: str
    passages: list[Passage]
    demonstrations: str  # the demonstrations block every pass's prompt starts with


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    graph.add_node("retrieve", steps.retrieve(deps))
    check = Decision(single_pass, go_on="answer")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(steps.answer, deps))
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "stop_check")
    graph.add_edge("answer", END)


# The CLI's and the trace page's line for the ensemble: each answer with its probability.
PROGRESS: Declared = {
    "ensemble": Line(
        "ensemble: {% for c in candidates %}{{ c.answer or '(empty)' }} "
        "{{ '%.3f' | format(c.probability) }}{{ ' · ' if not loop.last }}{% endfor %}",
        style="green",
    )
}


SPEC = MethodSpec(
    name="replug",
    title="REPLUG (Shi et al., 2024)",
    summary="each passage prepended to the question separately; the passes' answers ensembled "
    "with their probabilities weighted by the softmax of the retrieval scores (needs token "
    "log-probabilities)",
    context=REPLUGContext,
    state=REPLUGState,
    stops=(single_pass,),
    output=REPLUGOutput,
    roles=("generator",),
    stage_roles={"generate": "generator"},
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("passage_answers", "weights", "ensemble"),
    trace_view="generic",
    progress=PROGRESS,
    # the original's greedy passes (qa_final.py: call_api(..., temp=0))
    paper_profile=replace(PAPER, sampling={"temperature": 0.0}),
    # one pass per retrieved passage (the closed-book pass when none was found)
    calls=lambda ctx: ctx.top_k,
    lists=dict.fromkeys(
        ("passages", "scores", "weights", "passage_answers", "passage_probs", "ensemble"), "top_k"
    ),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
