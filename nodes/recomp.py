"""RECOMP's steps (Xu et al., 2024): retrieve, compress the passages (extractive or abstractive),
answer from the compressed text.

Model stages: ``summarize`` (the abstractive compressor, role ``compressor``) and ``answer``
(role ``answer``). The extractive compressor is an embedding model, not a chat model: its step
(``extract``) makes no model call and costs no LLM call.

What the paper leaves open and what noterag decided:

- Sentences (extractive): the passages' texts (no titles) joined by spaces and split after ".",
  "!" or "?" and whitespace unless the full stop ends a one-letter abbreviation ("J. K."),
  keeping sentences longer than five characters, as FlashRAG's ExtractiveRefiner means to
  (RECOMP's own inputs come pre-split with its data). FlashRAG's pattern,
  ``(?<![A-Za-z]\\.)(?<=[.!?])\\s+``, also refuses to split after any word ending in a letter
  and a full stop, so most sentences stay joined there; noterag requires the letter to stand
  alone. Each is scored by the dot product of its embedding with the question's (the
  original's ``get_contriever_scores``: the trained compressor is a Contriever); the top
  ``sentences`` are kept in their passage order and joined by spaces. Ties keep the earlier
  sentence. Fewer sentences than that: all are kept.
- Abstractive: the reply, stripped, is the compressed text; an empty one is RECOMP's selective
  augmentation (the answer prompt without passages), not a parse failure. No reply protocol is
  parsed, so no fallback is counted.
- The extractor defaults to the ``dense`` extra's offline all-MiniLM-L6-v2 (normalised, so the
  dot product is a cosine); without the extra and without ``extractor_model=``, an extractive
  run stops with one error line saying so. It is never replaced silently by another scorer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import get_runtime

from noterag.base.errors import ConfigError
from noterag.core.spec import Deps
from noterag.core.state import Passage
from noterag.core.step import Ask, Env, StepGen, both_ways, reply_text, run_context
from noterag.models.runnable import reads_original
from noterag.nodes.retrieve import retrieve as shared_retrieve

# A sentence ends after . ! ? and whitespace, not after a one-letter abbreviation such as "J."
# (FlashRAG's ExtractiveRefiner without its missing word boundary: module docstring)
_SENTENCE_END = re.compile(r"(?<=[.!?])(?<!\b[A-Za-z]\.)\s+")
_MIN_SENTENCE = 5  # characters: shorter pieces are dropped
EXTRACT_HINT = (
    "recomp's extractive compression scores sentences with an embedding model: install the "
    "dense extra (pip install torch==2.13.0 (a CPU build, first) then pip install "
    "'noterag[dense]') or build the graph with extractor_model=<a langchain Embeddings>"
)


@dataclass(frozen=True)
class RecompDeps(Deps):
    """RECOMP's build-time parts: besides the models, the extractive compressor's embedding
    model (None: the default, loaded on first use)."""

    extractor: Embeddings | None = None


def retrieve(state: dict[str, Any], env: Env) -> StepGen:
    """The top-k passages for the question (the shared step), after checking the run's task, so
    an unsupported task costs no search and no call."""
    env.prompts.answer_for(state.get("task") or env.ctx.task)
    update: dict[str, Any] = yield from shared_retrieve(state, env)
    return update


def summarize(state: dict[str, Any], env: Env) -> StepGen:
    """The abstractive compressor: one call over the question and the retrieved passages. The
    default, the run's model, reads ``summarize`` (ours); a trained compressor plugged in for the
    role reads RECOMP's training format (the passages' texts joined by newlines)."""
    passages: list[Passage] = state.get("passages") or []
    if reads_original(env.deps.models.get("compressor")):
        prompt = env.prompts.compressor_input.format(
            question=state["question"], document="\n".join(p["text"] for p in passages)
        )
    else:
        prompt = env.prompts.summarize.format(
            question=state["question"], document=env.profile.format_passages(passages)
        )
    reply = yield Ask("summarize", prompt)
    return compressed(state, env.emit, "abstractive", reply.strip(), llm_calls=1)


def split_sentences(passages: Sequence[Passage]) -> list[str]:
    """The passages' sentences, as FlashRAG's ExtractiveRefiner splits them (module docstring)."""
    text = " ".join(p["text"] for p in passages)
    return [s.strip() for s in _SENTENCE_END.split(text) if len(s.strip()) > _MIN_SENTENCE]


def top_sentences(sentences: Sequence[str], scores: Sequence[float], k: int) -> list[str]:
    """The ``k`` best-scored sentences in their passage order (ties: the earlier one)."""
    best = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))[:k]
    return [sentences[i] for i in sorted(best)]


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(x * y for x, y in zip(a, b, strict=True)))


def default_extractor() -> Embeddings:
    """The ``dense`` extra's offline embedding model (loaded once per process)."""
    from noterag.retrievers.extras import MissingExtraError

    try:
        from noterag.retrievers.dense import DEFAULT_MODEL, load_embeddings

        return load_embeddings(DEFAULT_MODEL)
    except (MissingExtraError, ImportError):
        raise MissingExtraError(EXTRACT_HINT) from None


def extract(deps: RecompDeps) -> Runnable:
    """The extractive compressor as a graph node: the top ``sentences`` of the passages by
    similarity to the question. Not a model step (nothing to count): a node of its own whose
    async path embeds off the event loop (the embedding model's async methods, its loading in a
    thread), as a server's async nodes must not block."""

    def setting(
        state: Mapping[str, Any], config: RunnableConfig
    ) -> tuple[Any, Callable[[Any], None], list[str]]:
        runtime = get_runtime(deps.context_schema)
        ctx = run_context(deps.context_schema, runtime.context, config.get("configurable"))
        return ctx, runtime.stream_writer, split_sentences(state.get("passages") or [])

    def done(state: Mapping[str, Any], ctx: Any, emit: Callable[[Any], None],
             sentences: list[str], question: list[float] | None,
             vectors: list[list[float]]) -> dict[str, Any]:  # fmt: skip
        scores = [_dot(question, v) for v in vectors] if question is not None else []
        kept = top_sentences(sentences, scores, ctx.sentences)
        update = compressed(state, emit, "extractive", " ".join(kept), llm_calls=0)
        update["trace"][0] |= {"sentences": len(sentences), "kept_sentences": len(kept)}
        return update

    def run(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx, emit, sentences = setting(state, config)
        if not sentences:
            return done(state, ctx, emit, [], None, [])
        embedder = deps.extractor or default_extractor()
        question = embedder.embed_query(state["question"])
        return done(state, ctx, emit, sentences, question, embedder.embed_documents(sentences))

    async def arun(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx, emit, sentences = setting(state, config)
        if not sentences:
            return done(state, ctx, emit, [], None, [])
        embedder = deps.extractor
        if embedder is None:
            embedder = await asyncio.to_thread(default_extractor)
        question, vectors = await asyncio.gather(
            embedder.aembed_query(state["question"]), embedder.aembed_documents(sentences)
        )
        return done(state, ctx, emit, sentences, question, vectors)

    return both_ways(run, arun, name="extract")


def compressed(
    state: Mapping[str, Any], emit: Callable[[Any], None], mode: str, text: str, *, llm_calls: int
) -> dict[str, Any]:
    """The compression's update: the text, its progress event and its trace entry (the
    retrieval it compressed, the compressed text, how many words each had)."""
    passages: list[Passage] = state.get("passages") or []
    before, after = sum(len(p["text"].split()) for p in passages), len(text.split())
    emit(
        {
            "type": "compressed",
            "step": 0,
            "compression": mode,
            "passages": len(passages),
            "passage_words": before,
            "compressed_words": after,
        }
    )
    return {
        "compression": mode,
        "compressed": text,
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]],
                "new_passage_ids": [p["id"] for p in passages],
                "compression": mode,
                "compressed": text,
                "passage_words": before,
                "compressed_words": after,
                "llm_calls": llm_calls,
            }
        ],
    }


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """Answer from the compressed text: vanilla RAG's answer prompt with it as the passages, or,
    when the compression is empty, the no-retrieval prompt (RECOMP's selective augmentation:
    nothing is prepended). The one call whose tokens stream to ``stream_mode="messages"``."""
    task = state.get("task") or env.ctx.task
    text = (state.get("compressed") or "").strip()
    if text:
        prompt = env.prompts.answer_for(task).format(query=state["question"], refs=text)
    else:
        no_context = env.prompts.no_context.get(task)
        if no_context is None:
            raise ConfigError(f"recomp has no answer prompt without passages for task {task!r}")
        prompt = no_context.format(query=state["question"])
    reply = yield Ask("answer", prompt, stream=True, verbatim=True)
    answer_text = reply_text(reply).strip()
    env.emit({"type": "answer", "answer": answer_text})
    return {
        "answer": answer_text,
        "question": state["question"],
        "messages": [AIMessage(answer_text, id=reply.id)],
    }
