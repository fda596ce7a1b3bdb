"""SuRe (Kim et al., ICLR 2024): Summarizing Retrievals using answer candidates. Algorithm 1:

    C_N = Retriever(q)                                                  retrieve   (top_k passages)
    y_1 .. y_K = M(p_can(q, C_N))                                       candidates (K = n_candidates)
    if K < 2: answer y_1 (nothing to compare; "" when there is none)    stop_check (sure_stop)
    s_k = M(p_sum(q, C_N, y_k))          for k = 1 .. K, concurrently   summarize
    v(s_k) = 1{M(p_val(q, y_k, s_k)) = True}            (Eq. 4)      || verify: validation
    r(s_k) = sum_{i != k} r_pair(s_k, s_i), both orders  (Eq. 5)      || verify: ranking
    answer = y_k*,  k* = argmax_k v(s_k) + r(s_k)  (ties: first)        verify -> stop_check -> answer

No loop, so no max_steps: a run is one pass (stop_reason says how the answer was chosen). The
prompts are the official code's (prompts/sure.py); the steps and what they decide where the
paper is silent are in nodes/sure.py. Model roles (``<role>_model=``): candidates, summary,
validation, ranking.

Defaults. top_k = 5: ReSP (Jiang et al., 2024), the paper of ours that compares against SuRe
(Table 2), runs every method with the top-5 documents per query (Section 5.2; FlashRAG's
default retrieval_topk, whose setup ReSP follows, is 5 too); SuRe's own paper and code use
N = 10 (``--n_retrieval 10``). n_candidates K = 2: SuRe's paper and code (p_can asks for "two
correct candidates"; ReSP sets none). Temperature 0 for every call unless the run sets one:
the official code's (``api_query(..., temp=0)``), where noterag's other paper profiles leave the
model's own. ``profile="original"`` retrieves SuRe's own N = 10; it has no ``official``
profile: its prompts already are the official code's, and noterag.core.profiles reproduces only
thunlp's official codes (the parsing quirks of SuRe's, listed below, are not reproduced).

Where the official code (bbuing9/ICLR24_SuRe, functions/) differs:
- passages: it cycles through the retrieved ones when there are fewer than --n_retrieval;
  we list those retrieved, ``{n_articles}`` their number;
- candidates: it reads at most "(a)".."(d)" and keeps the first two (``separation``), without
  cutting a candidate at a line break; without "(a)" it keeps the whole reply (split at commas
  when 2-4 parts); we keep the first K, cut at a line break, and read the first line only;
- summaries: it passes the whole reply, "[DONE]" and what follows included, to p_val and
  p_rank; we cut at "[DONE]";
- validation: ``'True' in reply`` (case-sensitive), and validity counts only when one summary
  says True and the other's reply contains Cannot / False / Unknown (then 0.5·rank + 0.5·v);
  we apply Eq. 4 and Eq. 6 (v + r) to a parsed True / False;
- ranking: it compares the two orders' whole replies with "passage 1" / "passage 2" and treats
  a list of corner cases as unreadable (any reply containing the letter "n" among them); when
  one order is unreadable the other counts in full. We read "Passage 1/2" tolerantly and
  average the two orders (0.5 for an unreadable one). For K = 2 with readable replies both
  give the same order; with one unreadable call they can differ (theirs: a tie, ours: the
  readable preference at half weight);
- one candidate: it makes no summary or validation call but still two ranking calls on "N/A"
  summaries and may answer "N/A"; we answer the candidate without further calls.

Where FlashRAG (RUC-NLPIR/FlashRAG, flashrag/pipeline/branching_pipeline.py, SuRePipeline) differs:
- prompts: reworded (its line joins drop spaces: "After readingthe passages", "(b)yy"); a
  "Reference:" header; no "Choices:" line and no candidate letter in p_sum; "[True,False]";
- candidates: every "(x) ..." match (no cap at two; a candidate with parentheses is cut; commas
  removed); no candidate: an empty prediction, no fallback;
- validation: "true" anywhere in the lowercased reply;
- ranking: every ordered pair, as here, but "passage 1" anywhere wins first ("Passage 2 is
  better than passage 1" reads as 1), and a summary's r counts only the calls that show it as
  Passage 1 (``score_matrix.sum(axis=1)``): for K = 2 the same order as averaging both calls,
  not for K > 2;
- one candidate: summarised and validated (two calls), then answered.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar

from langgraph.graph import END, StateGraph

from noterag.core.context import RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import PAPER, Profile
from noterag.core.progress import Declared, Line, Part
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields, Passage, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.retrieve import retrieve
from noterag.nodes.sure import candidates, predict, summarize, sure_passages, verify
from noterag.prompts import sure as prompts

MAX_CANDIDATES = 26  # the marks (a) .. (z)


@dataclass(kw_only=True)
class SuReContext(RunContext):
    """SuRe's settings: K answer candidates (paper and official code: 2), top-5 passages (ReSP,
    Table 2), temperature 0 (the official code)."""

    # profile="original": SuRe's own N (bbuing9/ICLR24_SuRe @ 6320590, query_gpt.py:
    # --n_retrieval default 10; the paper, §4: N = 10).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {"top_k": 10}

    n_candidates: int = field(
        default=2,
        metadata={
            "description": "K: the answer candidates generated from the passages, each then "
            "summarised, validated and ranked (SuRe: 2; the prompt asks for 'two' then). Costs "
            "1 + 2K + K(K-1) calls.",
            "ge": 2,
            "le": MAX_CANDIDATES,
        },
    )
    temperature: float | None = field(
        default=None,
        metadata={
            "description": "Sampling temperature for every call (None: 0, the official SuRe "
            "code's temperature).",
            "ge": 0,
            "le": 2,
            "client": "sampling",
        },
    )


class SuReOutput(CostFields, ChatFields, total=False):
    """What a SuRe run returns: the candidates, their summaries and scores, in candidate order."""

    question: str
    answer: str
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str
    candidates: list[str]  # y_1 .. y_K as parsed
    summaries: list[str]  # s_k, the candidate-conditioned summaries
    validity: list[bool]  # v(s_k)
    ranking: list[float]  # r(s_k, S_K)
    scores: list[float]  # v(s_k) + r(s_k, S_K)
    chosen: int | None  # k*, the index of the answer among the candidates


class SuReState(SuReOutput, total=False):
    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]


def wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("retrieve", node(retrieve, deps))
    graph.add_node("candidates", node(candidates, deps))
    graph.add_node("summarize", node(summarize, deps))
    graph.add_node("verify", node(verify, deps))
    check = Decision(sure_stop, go_on="summarize")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_node("answer", node(predict, deps))
    graph.add_edge("question", "retrieve")
    graph.add_edge("retrieve", "candidates")
    graph.add_edge("candidates", "stop_check")
    graph.add_edge("summarize", "verify")
    graph.add_edge("verify", "stop_check")
    graph.add_edge("answer", END)


# --- progress lines (the CLI's and the trace page's) ---------------------------------------------

# the k-th candidate's mark, as the prompts write it (nodes/sure.py's letter): 0 -> "a"
LETTER = "'%c' | format(97 + {})"
PROGRESS: Declared = {
    "candidates": (
        Line("no answer candidate in the reply", style="yellow", when="not candidates"),
        Line(
            "answer candidates: {% for c in candidates %}({{ "
            + LETTER.format("loop.index0")
            + " }}) "
            "{{ c }}{{ ' · ' if not loop.last }}{% endfor %}",
            Part(" (reply without (a)/(b) marks)", "yellow", when="not (parsed | default(true))"),
            style="cyan",
            when="candidates",
        ),
    ),
    "candidate_summaries": Line(
        "summarised the passages for each of {{ summaries | length }} candidates", style="cyan"
    ),
    "selection": Line(
        "selected ({{ " + LETTER.format("(chosen or 0) | int") + " }}) "
        "{{ candidates[(chosen or 0) | int] }} (scores "
        "{% for s in scores %}{{ '%g' | format(s) }}{{ ', ' if not loop.last }}{% endfor %}"
        "{{ '; a tie: the first)' if tied | length > 1 else ')' }}",
        style="green",
    ),
}


def sure_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """SuRe has no loop: it stops once the candidates' summaries are scored, or at once when
    the candidate reply gave fewer than two candidates (nothing to compare; see nodes/sure.py)."""
    found = state.get("candidates") or []
    if scores := state.get("scores"):
        best = max(scores)
        tied = [chr(ord("a") + k) for k, score in enumerate(scores) if score == best]
        why = f"single pass: candidate ({tied[0]}) of {len(found)} scored best (validity + ranking)"
        return why + (f", tied with ({'), ('.join(tied[1:])}): the first" if len(tied) > 1 else "")
    if not found:
        return "the candidate reply named no answer candidate: no answer"
    if len(found) == 1:
        return "one answer candidate: nothing to compare, answered with it"
    return None


def sure_calls(ctx: Any) -> int:
    """The calls of one pass at K = n_candidates: p_can once, p_sum and p_val once per
    candidate, p_rank once per ordered pair (1 + 2K + K(K-1); 7 at K = 2)."""
    k = ctx.n_candidates
    return 1 + 2 * k + k * (k - 1)


SPEC = MethodSpec(
    name="sure",
    title="SuRe (Kim et al., 2024)",
    summary="answer candidates, a summary of the passages for each, validity and pair-wise "
    "ranking of the summaries select the answer",
    context=SuReContext,
    state=SuReState,
    stops=(sure_stop,),
    output=SuReOutput,
    roles=("candidates", "summary", "validation", "ranking"),
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("candidates", "summaries", "validity", "ranking", "scores"),
    trace_view="generic",
    progress=PROGRESS,
    # the official code's passage format and temperature (see the docstring)
    paper_profile=replace(PAPER, format_passages=sure_passages, sampling={"temperature": 0.0}),
    tasks=("multihop",),  # its first step refuses the others
    calls=sure_calls,
    lists=dict.fromkeys(
        ("candidates", "summaries", "validity", "ranking", "scores"), "n_candidates"
    ),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
