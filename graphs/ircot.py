"""IRCoT (Trivedi et al., 2023): interleaving retrieval with chain-of-thought reasoning.

    P <- retrieve(q)                       (wh-words removed; top_k)            retrieve
    CoT <- []
    loop:
        s <- first sentence of LLM(demos, P, q, CoT)   (stop "\\n")             reason
        CoT <- CoT + [s]
        if s says "... answer is:? X", or s is empty,
           or |CoT| >= max_steps: break                               stop_check (ircot_stop)
        P <- P + new paragraphs of retrieve(last non-reasoning sentence of CoT)  retrieve
             (none already collected, none past max_passages)
    answer <- X if the loop concluded, else the QA reader:                     answer
              "answer is X" in LLM(demos, P, q)   (IRCoT QA; qa_reader: always)

As the authors' code runs it (StonyBrookNLP/ircot @ 3c1820f: ``commaqa/inference/ircot.py``,
``base_configs/ircot_qa_codex_<dataset>.jsonnet``): the demonstrations are its CoT files with
two distractor paragraphs per example (noterag.prompts.ircot: which ones and how many), the
paragraphs are "Wikipedia Title: <title>\\n<first 350 words>", each step keeps one sentence of the
reply, the next query is the last sentence that states a fact (one starting "So", "Thus",
"Therefore", ... does not), and the loop stops on "answer is", an empty sentence, or 10
sentences (``max_num_sentences``). The paper reports IRCoT QA: a separate reader call that
answers from every collected paragraph after the loop; ``qa_reader=True`` does that. By default
(``qa_reader=False``) a concluded loop answers with its own sentence and only a loop that hit
its cap calls the reader, the cap's answer as the original gives it.

Defaults: greedy decoding (temperature 0, the original's GPT3Generator), top_k 5 (ReSP Table 2
runs every baseline with 5 documents per retrieval; IRCoT tuned K in {2, 4, 6, 8} per dataset),
max_steps 10 and max_passages 15 (the original's; ReSP does not state them), HotpotQA's
demonstrations, prompt set 1. ``profile="original"`` runs IRCoT QA as the paper reports it: the
reader after every loop, K 6 (the configs' value before tuning), top_p 1 and 300 tokens
(GPT3Generator's); ``IRCoTContext.ORIGINAL`` has the sources.

Where noterag differs from the original: passages are deduplicated by id (the original: by a
90% fuzzy match of title and text), the first sentence is cut by a rule instead of spaCy, the
length rules count approximate GPT-2 tokens (noterag.nodes.ircot); the original's retries of
failed retrievals and its pinned paragraphs (IIRC only) have no counterpart.

FlashRAG's IRCOTPipeline (RUC-NLPIR/FlashRAG ``flashrag/pipeline/active_pipeline.py``), which
produced the IRCoT numbers ReSP reports, differs from the original: its prompt is its own
instruction with one demonstration ("Question: ... Thought: ..."), and its user template has
no slot for the thoughts so far (``previous_gen`` is passed but never shown); it stops each
thought at "." or "\\n"; it retrieves with the raw thought (no wh-word removal, no skipping of
reasoning sentences); it merges the passages by id with their best score and sorts them by
ascending score; it has no passage cap; it stops on "So the answer is:" or max_iter (2 when
ReSP ran it, 5 in its run_exp.py later); its answer is what follows "So the answer is:" in all
thoughts joined, else the whole chain of thought (no reader).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar, Literal

from langgraph.graph import END, StateGraph

from noterag.base.errors import ConfigError
from noterag.core.context import MOST_PASSAGES, MOST_STEPS, RunContext, setting
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import PAPER, Profile
from noterag.core.progress import Declared, Line
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.ircot import answer, reason, retrieve
from noterag.prompts import ircot as prompts


@dataclass(kw_only=True)
class IRCoTContext(RunContext):
    """IRCoT's settings: its loop caps and which of the authors' demonstrations it reads."""

    # profile="original": IRCoT QA as the paper reports it (StonyBrookNLP/ircot @ 3c1820f,
    # base_configs/ircot_qa_codex_<dataset>.jsonnet: the reader, "answer_main_question", answers
    # after every loop; bm25_retrieval_count 6, the config's value, which the authors then
    # tuned per dataset over {2, 4, 6, 8} on dev data without recording the winners), with
    # GPT3Generator's sampling (commaqa/models/gpt3generator.py: temperature 0, top_p 1,
    # max_tokens 300).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {
        "qa_reader": True,
        "top_k": 6,
        "top_p": 1.0,
        "max_tokens": 300,
    }

    max_steps: int = setting(
        10,
        "The most chain-of-thought sentences (reasoning steps); a loop that reaches it without "
        '"answer is" is answered by the QA reader (the original\'s max_num_sentences, 10).',
        ge=1,
        le=MOST_STEPS,
    )
    max_passages: int | None = setting(
        15,
        "Paragraphs collected at most; retrieved ones past it are not added (the original's "
        "global_max_num_paras, 15). None: no cap.",
        ge=1,
        le=MOST_PASSAGES,
    )
    demos: Literal["hotpotqa", "2wikimultihopqa", "musique"] = setting(
        "hotpotqa", "Whose chain-of-thought demonstrations the prompts show (the original's files)."
    )
    demo_files: Literal["ircot", "adaptive-rag"] = setting(
        "ircot",
        "Whose demonstration files: ircot, StonyBrookNLP/ircot's gold_with_2_distractors files "
        "(the config's distractor_count); adaptive-rag, starsuzi/Adaptive-RAG's own "
        "gold_with_1_distractors files, which its route C read.",
    )
    prompt_set: int = setting(
        1,
        "Which of the original's three sets of 15 demonstrations (1, 2 or 3; the authors tune "
        "on set 1 and report the mean over the three).",
        ge=1,
        le=3,
    )
    max_demos: int | None = setting(
        None,
        "Demonstrations at most, the set's first ones (None: all 15, then the length rules).",
        ge=0,
        le=100,
    )
    prompt_tokens: int | None = setting(
        8000,
        "The original's prompt budget in tokens (code-davinci-002: 8000, 300 of them kept for "
        "the reply): demonstrations are dropped, the last ones when read and the first ones at "
        "each call, until the prompt fits (tokens estimated). None: keep them all.",
        ge=1,
        le=200_000,
    )
    temperature: float | None = setting(
        None,
        "Sampling temperature for every call (None: 0, the original's greedy decoding: "
        "GPT3Generator's temperature=0, top_p=1).",
        ge=0,
        le=2,
        client="sampling",
    )
    qa_reader: bool = setting(
        False,
        "IRCoT QA as the paper reports it: after the loop the QA reader answers from every "
        "collected paragraph, even when the loop concluded. Off: a concluded loop answers with "
        'its own "answer is"; only a loop that hit its cap calls the reader.',
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.demos not in prompts.DATASETS:
            raise ConfigError(
                f"demos must be one of {', '.join(prompts.DATASETS)}, not {self.demos!r}"
            )
        if self.demo_files not in prompts.DEMO_FILES:
            raise ConfigError(
                f"demo_files must be one of {', '.join(prompts.DEMO_FILES)}, not {self.demo_files!r}"
            )


class IRCoTOutput(CostFields, ChatFields, total=False):
    """What an IRCoT run returns: the chain of thought (one sentence per reasoning step)."""

    question: str
    answer: str
    cot: list[str]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int  # reasoning steps run
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class IRCoTState(IRCoTOutput, total=False):
    """The loop's working values."""

    task: str
    passages: list[Passage]  # every paragraph collected so far, in the order collected
    query: str  # the last retrieval's query
    new_passage_ids: list[str]  # what the last retrieval added
    concluded: str | None  # the answer of the last sentence when it says "answer is"


def wire(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    for step in (retrieve, reason, answer):
        graph.add_node(step.__name__, node(step, deps))
    check = Decision(ircot_stop, go_on="retrieve")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "reason")
    graph.add_edge("reason", "stop_check")
    graph.add_edge("answer", END)


# The CLI's and the trace page's line for a reasoning step (Adaptive-RAG's route C shows it too).
PROGRESS: Declared = {
    "thought": (
        Line("the reasoner wrote no sentence", style="yellow", when="not sentence"),
        Line(
            "thought: {{ sentence }}",
            style="{{ 'green' if concluded else 'cyan' }}",
            when="sentence",
        ),
    )
}


# The trace page: per reasoning step its query, the paragraphs that query added and the sentence;
# the QA reader's call (when it ran) with every collected paragraph and its reply. The cards of
# one entry are their own piece: Adaptive-RAG's route C shows IRCoT's entries with them.
ENTRY_CARDS = """\
{% if entry.get("reader") %}
{% call card.section(entry.get("step"), entry, "QA reader") %}
{{ card.row("Paragraphs", card.passage_list(entry.get("passage_ids") or [])) }}
{{ card.row("Reply", card.text(entry.get("reply"), "note")) }}
{% endcall %}
{% else %}
{% call card.section(entry.get("step"), entry) %}
{{ card.row("Query", card.queries([entry.get("query")] if entry.get("query") else [])) }}
{{ card.row("New paragraphs", card.passage_list(entry.get("new_passage_ids") or [])) }}
{{ card.row("Sentence", card.text(entry.get("sentence"), "note")) }}
{{ card.row("Concluded", card.verdict("answer is", entry.get("concluded"))) }}
{% endcall %}
{% endif %}
"""
TRACE_VIEW = (
    '{% import "trace/_cards.html.j2" as card with context %}\n'
    "{% for entry in trace %}\n" + ENTRY_CARDS + "{% endfor %}\n"
)

# The original decodes greedily: StonyBrookNLP/ircot @ 3c1820f, commaqa/models/gpt3generator.py,
# GPT3Generator.__init__ (temperature=0, top_p=1; the configs set neither). Adaptive-RAG's route C
# runs the same generator (starsuzi/Adaptive-RAG @ 0c88670, same file), and so do its A and B.
GREEDY = replace(PAPER, sampling={"temperature": 0.0})


def ircot_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """IRCoT, after each reasoning step (the original's exit controller): the sentence says
    "answer is", the reasoner wrote no sentence, or max_steps sentences were written."""
    steps, cot = state.get("steps", 0), state.get("cot") or []
    if state.get("concluded") is not None:
        return f'the reasoner concluded ("answer is") at step {steps - 1}'
    if cot and not cot[-1]:
        return f"the reasoner wrote no sentence at step {steps - 1}"
    if steps >= ctx.max_steps:
        return f"{steps} reasoning step(s) without an answer (max_steps = {ctx.max_steps})"
    return None


SPEC = MethodSpec(
    name="ircot",
    title="IRCoT (Trivedi et al., 2023)",
    summary="interleaved retrieval and chain of thought: each new CoT sentence is the next query, "
    'until "So the answer is:" or max_steps',
    context=IRCoTContext,
    state=IRCoTState,
    stops=(ircot_stop,),
    output=IRCoTOutput,
    roles=("reasoner", "reader"),
    stage_roles={"reason": "reasoner", "answer": "reader"},
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("cot",),
    trace_view=TRACE_VIEW,
    progress=PROGRESS,
    paper_profile=GREEDY,
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
