"""REPLUG's steps (Shi et al., 2024): retrieve with the retriever's scores, then one pass per
passage and their answer-level ensemble, as the authors' QA code does (swj0419/REPLUG at
6cbe797, ``downstream_eval/qa_final.py``: ``call_api``, ``inference_one_ex``).

Model stage: ``generate`` (role ``generator``), one call per passage, concurrently, each asking
for token log-probabilities (noterag.nodes.logprobs); a model that returns none stops the run
with one clear error.

The ensemble (Eq. 1 of the paper, p(y | x, D') = Σ_d p(y | d ∘ x) · λ(d, x), with
λ(d, x) = softmax over D' of the retrieval scores s(d, x)), at the level of whole answers:
- pass d answers a_d greedily (temperature 0, at most 10 tokens, stop at a newline: the
  original's ``--maxlen 10``, ``stop="\\n"``), the reply stripped;
- p(a_d | d ∘ x) is the pass's ``perplexity`` in the original: exp of the mean log-probability of
  its tokens (newline tokens skipped, nothing after an end-of-text token), the geometric mean of
  the token probabilities;
- each distinct answer a (identical strings) scores Σ_{d: a_d = a} λ(d, x) · p(a_d | d ∘ x); the
  answer is the best one, a tie going to the one whose first pass ranks higher.
A pass's probability for an answer another pass wrote is not computed (it would need the
log-probabilities of a given continuation, which a chat endpoint does not return): it counts as
0, as in the original.

Parse fallbacks (counted in the state's ``fallbacks``, noterag.core.parsing.fell_back):

| kind         | a reply without ... | fallback                                               |
|--------------|---------------------|--------------------------------------------------------|
| empty_answer | any text            | the pass answers "" with probability 0 (the original's |
|              |                     | mean over no token is NaN)                             |
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import get_runtime

from noterag.base.errors import ConfigError
from noterag.core.parsing import fell_back
from noterag.core.retry import noted_search
from noterag.core.spec import Deps
from noterag.core.step import (
    Ask,
    Env,
    Search,
    StepGen,
    both_ways,
    reply_text,
    retrieval_event,
    run_context,
    to_passage,
)
from noterag.nodes.logprobs import Token, logprob_options, token_logprobs
from noterag.retrievers.calls import asearch

METHOD = "replug"
STOP = ["\n"]  # call_api: stop="\n"
MAX_TOKENS = 10  # README: --maxlen 10 for QA
END_OF_TEXT = "<|endoftext|>"


# --- retrieval with scores --------------------------------------------------------------------------


def _score(doc: Document, retriever: Any) -> float:
    score: Any = (doc.metadata or {}).get("score")
    try:
        return float(score)
    except (TypeError, ValueError):
        raise ConfigError(
            "replug weights each passage by its retrieval score, and the retriever "
            f"{type(retriever).__name__} returned a passage without one "
            "(Document.metadata['score'])"
        ) from None


def demonstrations(path: str, count: int) -> list[tuple[str, str]]:
    """The first ``count`` questions of the dataset file ``path`` with their first answer (the
    original: ``data["demos"][:16]``, ``demo["answer"][0]``); read with noterag's dataset
    reader, so a missing or malformed file is one clear error."""
    from noterag.datasets import load_dataset

    return [
        (ex.question, str(ex.golds[0]) if ex.golds else "")
        for ex in load_dataset(path, limit=count)
    ]


def demonstration_block(
    prompts: Any, demos: Sequence[tuple[str, str]], tops: Sequence[Sequence[Document]]
) -> str:
    """The demonstrations every pass's prompt starts with: each with the text of the top-1
    passage retrieved for its question (qa_final.py ``retrieve_ex``; none found: empty)."""
    return "".join(
        prompts.demonstration.format(
            passage=top[0].page_content if top else "", question=question, answer=answer.strip()
        )
        for (question, answer), top in zip(demos, tops, strict=True)
    )


def retrieve(deps: Deps) -> Runnable:
    """The graph step that retrieves the top-k passages for the question with their retrieval
    scores s(d, x), and the top-1 passage of each demonstration's question (``demos_file``).
    noterag's shared search effect keeps a passage's id, title and text only, so this step
    searches itself (sync and async alike), with the run's context and stream writer. An
    unknown task fails before the search."""

    def prepare(
        state: Mapping[str, Any], config: RunnableConfig
    ) -> tuple[Any, Any, Any, list[tuple[str, str]]]:
        runtime = get_runtime(deps.context_schema)
        ctx: Any = run_context(deps.context_schema, runtime.context, config.get("configurable"))
        task = state.get("task") or ctx.task
        prompt_set = deps.prompts[deps.profile(ctx, state).name]
        prompt_set.answer_for(task)
        demos = demonstrations(ctx.demos_file, ctx.max_demos) if ctx.max_demos else []
        return ctx, runtime.stream_writer, prompt_set, demos

    def update(
        state: Mapping[str, Any], docs: Sequence[Document], k: int, writer: Any, block: str
    ) -> dict[str, Any]:
        scores = [_score(doc, deps.retriever) for doc in docs]
        found = [to_passage(doc) for doc in docs]
        writer(retrieval_event(state["question"], k, found))  # what the shared search sends
        writer(
            {
                "type": "passages",
                "step": 0,
                "queries": [state["question"]],
                "passages": [{"id": p["id"], "title": p["title"]} for p in found],
            }
        )
        return {
            "passages": found,
            "scores": scores,
            "passage_ids": [p["id"] for p in found],
            "demonstrations": block,
        }

    def run_sync(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx, writer, prompt_set, demos = prepare(state, config)
        with noted_search():
            docs = deps.retriever.invoke(state["question"], k=ctx.top_k)[: ctx.top_k]
            tops = [deps.retriever.invoke(question, k=1)[:1] for question, _ in demos]
        return update(state, docs, ctx.top_k, writer, demonstration_block(prompt_set, demos, tops))

    async def run_async(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx, writer, prompt_set, demos = prepare(state, config)
        searches = [Search(state["question"], ctx.top_k)] + [Search(q, 1) for q, _ in demos]
        with noted_search():
            found = await asyncio.gather(*(asearch(deps.retriever, s.query, s.k) for s in searches))
        docs, tops = found[0][: ctx.top_k], [top[:1] for top in found[1:]]
        return update(state, docs, ctx.top_k, writer, demonstration_block(prompt_set, demos, tops))

    return both_ways(run_sync, run_async, name="retrieve")


# --- the ensemble -----------------------------------------------------------------------------------


def passage_weights(scores: Sequence[float]) -> list[float]:
    """λ(d, x): the softmax of the retrieval scores (``scipy.special.softmax`` in the original)."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [e / total for e in exps]


def pass_probability(tokens: Sequence[Token]) -> float:
    """p(a_d | d ∘ x) as the original computes it: exp of the mean log-probability of the
    reply's tokens, newline tokens skipped, none after an end-of-text token; 0 for no token."""
    kept: list[float] = []
    for token in tokens:
        if token.text == END_OF_TEXT:
            break
        if token.text != "\n":
            kept.append(token.logprob)
    return math.exp(sum(kept) / len(kept)) if kept else 0.0


def ensemble(
    answers: Sequence[str], probabilities: Sequence[float], weights: Sequence[float]
) -> list[dict[str, Any]]:
    """Each distinct answer with Σ λ(d, x) · p(a_d | d ∘ x) over the passes that wrote it,
    best first (a tie keeps the order of the answers' first passes)."""
    totals: dict[str, float] = {}
    passes: dict[str, list[int]] = {}
    for d, (text, p, weight) in enumerate(zip(answers, probabilities, weights, strict=True)):
        totals[text] = totals.get(text, 0.0) + weight * p
        passes.setdefault(text, []).append(d)
    ranked = sorted(totals, key=lambda text: -totals[text])  # sorted() is stable
    return [
        {"answer": text, "probability": totals[text], "passes": passes[text]} for text in ranked
    ]


# --- the answer ---------------------------------------------------------------------------------


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """One pass per passage (the passage prepended to the question), concurrently; the answer
    is the best of their answer-level ensemble. With no passage, one closed-book pass answers.
    The chosen answer reaches ``messages`` (and the messages stream, once) as an AI message:
    no single call's tokens are the answer, so none stream."""
    task = state.get("task") or env.ctx.task
    passages = state.get("passages") or []
    # the demonstrations (demos_file) before each pass's prompt, as qa_final.py builds it
    shown = state.get("demonstrations") or ""
    if passages:
        template = env.prompts.answer_for(task)
        prompts = [
            shown + template.format(passage=p["text"], question=state["question"]) for p in passages
        ]
        weights = passage_weights(state.get("scores") or [])
    else:
        prompts = [shown + env.prompts.closed_book.format(question=state["question"])]
        weights = [1.0]
    options = logprob_options(env, stop=STOP, max_tokens=MAX_TOKENS)
    replies: list[BaseMessage] = yield [
        Ask("generate", prompt, message=True, options=options) for prompt in prompts
    ]
    model = env.deps.model_for("generate")
    answers, probabilities = [], []
    for reply in replies:
        tokens = token_logprobs(reply, method=METHOD, model=model)
        text = reply_text(reply).strip()
        if not text:
            fell_back("empty_answer")
        answers.append(text)
        probabilities.append(pass_probability(tokens) if text else 0.0)
    ranked = ensemble(answers, probabilities, weights)
    chosen = ranked[0]["answer"]
    env.emit({"type": "ensemble", "step": 0, "candidates": ranked, "answer": chosen})
    env.emit({"type": "answer", "answer": chosen})
    return {
        "answer": chosen,
        "question": state["question"],
        "passage_answers": answers,
        "passage_probs": probabilities,
        "weights": weights,
        "ensemble": ranked,
        "messages": [AIMessage(chosen, id=f"replug-{uuid.uuid4()}")],
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]],
                "new_passage_ids": [p["id"] for p in passages],
                "closed_book": not passages,
                "scores": list(state.get("scores") or []),
                "weights": weights,
                "answers": answers,
                "probabilities": probabilities,
                "ensemble": ranked,
                "llm_calls": len(prompts),
            }
        ],
    }
