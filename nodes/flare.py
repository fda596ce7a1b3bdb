"""FLARE's steps (Jiang et al., 2023): retrieve, look_ahead, regenerate and the answer, as the
authors' code runs them (jzbjyb/FLARE at ec4b06b, ``src/openai_api.py`` ``QueryAgent.ret_prompt``
with ``configs/2wikihop_flare_config.json``; ``src/templates.py`` ``ApiReturn.use_as_query``).
Where noterag differs, the step says so.

Model stages: ``look_ahead`` and ``regenerate`` (role ``generator``), ``ask_question`` (role
``questioner``, the explicit-query variant only; the original asks gpt-3.5-turbo). The
generator's calls ask for token log-probabilities (noterag.nodes.logprobs); a model that
returns none stops the run with one clear error.

A token's probability is ``exp(logprob)``. A sentence is the reply's text up to the first
sentence end (., ! or ? before whitespace, not after an abbreviation or an initial) that lies at
least 5 characters in (``ApiReturn.min_sent_len``); the original splits with NLTK's Punkt,
noterag by this rule. The sentence's tokens are those that start before its end.

Parse fallbacks (counted in the state's ``fallbacks``, noterag.core.parsing.fell_back):

| kind      | a reply without ...                       | fallback                                 |
|-----------|-------------------------------------------|------------------------------------------|
| answer_is | "answer is X" (multihop) or "answer is    | the whole generation is the answer (the  |
|           | yes/no." (strategyqa) in the generation   | original's evaluation scores it as wrong |
|           |                                           | format)                                  |
| question  | a question ending in "?" (every generated | the look-ahead sentence is the query (as |
|           | question of the explicit-query variant)   | the original when it finds no term)      |
"""

from __future__ import annotations

import math
import re
import string
import uuid
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage

from noterag.core.parsing import fell_back
from noterag.core.state import Passage
from noterag.core.step import Ask, Effect, Env, Search, StepGen
from noterag.nodes.logprobs import Token, logprob_options, token_logprobs
from noterag.prompts.flare import Demonstration, demonstrations

METHOD = "flare"
# the original's final_stop_sym for completion models: a blank line ends the answer
STOP = ["\n\n"]
# ApiReturn.min_sent_len: a sentence end closer to the start than this is no boundary
MIN_SENTENCE_CHARS = 5
# extract_low_confidence_terms_rule: low-confidence tokens closer than this form one term
MIN_TERM_GAP = 5
_PUNCTUATION = frozenset(string.punctuation)

# A sentence ends at ., ! or ? (and the closing quotes or brackets after it) before whitespace;
# not after an initial or a common abbreviation (the rule of noterag.nodes.ircot).
_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*(?=\s)")
_ABBREVIATION = re.compile(
    r"(?:^|\s)(?:[A-Z]|Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Mt|Ft|No|vs|etc|e\.g|i\.e|U\.S|U\.K)\."
    r"[\"'”’)\]]*$"
)


def probability(token: Token) -> float:
    return math.exp(token.logprob)


def sentence_end(text: str) -> int:
    """Where the first sentence of ``text`` ends (its length when it has one sentence): the
    first sentence end at least MIN_SENTENCE_CHARS past the first non-space character."""
    start = len(text) - len(text.lstrip())
    for end in _END.finditer(text):
        if end.end() - start < MIN_SENTENCE_CHARS or _ABBREVIATION.search(text[: end.end()]):
            continue
        return end.end()
    return len(text)


class Sentence(NamedTuple):
    """The first sentence of a reply: its text (stripped), its tokens, and what the reply held
    after it."""

    text: str
    tokens: list[Token]
    rest: str


def first_sentence(tokens: Sequence[Token]) -> Sentence:
    """The reply's first sentence (``ApiReturn.truncate_at_boundary("sentence")``) with the
    tokens that start before its end. The reply's text is its tokens joined (what the
    log-probabilities belong to)."""
    text = "".join(token.text for token in tokens)
    end = sentence_end(text)
    kept: list[Token] = []
    offset = 0
    for token in tokens:
        if offset >= end:
            break
        kept.append(token)
        offset += len(token.text)
    return Sentence(text[:end].strip(), kept, text[end:])


def is_confident(tokens: Sequence[Token], threshold: float) -> bool:
    """The look-ahead is accepted without retrieval unless a token's probability is at most θ
    (``use_as_query``: ``p <= low_prob``; the paper says "lower than θ")."""
    return all(probability(token) > threshold for token in tokens)


def masked_query(tokens: Sequence[Token], mask_threshold: float) -> str:
    """The implicit query: the sentence with every token of probability at most β replaced by a
    space (``mask_method="simple"``), stripped."""
    return "".join(
        token.text if probability(token) > mask_threshold else " " for token in tokens
    ).strip()


def low_confidence_terms(tokens: Sequence[Token], mask_threshold: float) -> list[str]:
    """The explicit-query variant's terms (``extract_low_confidence_terms_rule``): runs of
    tokens of probability at most β, two of them one term when fewer than MIN_TERM_GAP tokens
    apart (the tokens between included); a term that is one punctuation mark is dropped. The
    original then asks gpt-3.5-turbo to widen each term to its whole constituent
    (``extract_constituents``); noterag keeps the terms as found."""
    terms: list[list[str]] = []
    previous = -1
    for i, token in enumerate(tokens):
        if probability(token) > mask_threshold:
            continue
        if previous == -1 or i - previous >= MIN_TERM_GAP:
            terms.append([token.text])
        else:
            terms[-1].extend(t.text for t in tokens[previous + 1 : i + 1])
        previous = i
    joined = ["".join(term).strip() for term in terms]
    return [term for term in joined if term and term not in _PUNCTUATION]


def finished(sentence: Sentence, message: BaseMessage) -> str | None:
    """Why the answer is complete after this sentence, or None: the reply held nothing after it
    and the model stopped by itself (not at the token cap); an empty sentence ends it too."""
    if not sentence.text:
        return "the generator wrote no sentence"
    if not sentence.rest.strip() and message.response_metadata.get("finish_reason") != "length":
        return "the generator ended its answer"
    return None


# --- the prompt ---------------------------------------------------------------------------------


def _clean(texts: Sequence[str]) -> list[str]:
    # CtxPrompt.clean_rets: newlines become spaces, empty passages are dropped
    cleaned = (text.replace("\n", " ").strip() for text in texts)
    return [text for text in cleaned if text]


def block(env: Env, texts: Sequence[str], case: str) -> str:
    """An exemplar or the test input under its search results (``ctx_position="before_case"``);
    the input alone when there are none."""
    found = _clean(texts)
    if not found:
        return case
    references = "\n".join(f"[{i}]: {text}" for i, text in enumerate(found, 1))
    return env.prompts.search_results.format(passages=references) + "\n" + case


def generation(sentences: Sequence[str]) -> str:
    """The text generated so far as the prompt continues it: each sentence after a space (the
    original prefixes a chat model's reply with one)."""
    return "".join(" " + sentence for sentence in sentences if sentence)


def _demonstrations(state: dict[str, Any], env: Env) -> tuple[Demonstration, ...]:
    task = state.get("task") or env.ctx.task
    shown = demonstrations(task, env.prompts.answer_for(task))
    return shown if env.ctx.max_demos is None else shown[: env.ctx.max_demos]


def generation_prompt(state: dict[str, Any], env: Env) -> str:
    """The exemplars (each under the passages retrieved for its question), then the test input
    under the current passages, continued by the sentences so far."""
    task = state.get("task") or env.ctx.task
    demos = _demonstrations(state, env)
    demo_passages = state.get("demo_passages") or [[] for _ in demos]
    blocks = [
        block(env, texts, demo.text) for demo, texts in zip(demos, demo_passages, strict=True)
    ]
    case = env.prompts.answer_for(task).format(question=state["question"])
    passages = [p["text"] for p in state.get("passages") or []]
    blocks.append(block(env, passages, case + generation(state.get("sentences") or [])))
    return "\n\n".join(blocks)


def reply_budget(state: Mapping[str, Any], ctx: Any) -> int:
    """Tokens one call may generate: ``look_ahead_tokens``, but no more than what is left of
    ``max_length``. The original asks its continuation for ``min(max_generation_len -
    max_gen_len, ret_frequency)`` tokens (jzbjyb/FLARE @ ec4b06b, src/openai_api.py, line 452);
    noterag keeps a confident look-ahead as the sentence, so the look-ahead obeys the same
    budget, and an answer never runs past max_length."""
    left = ctx.max_length - int(state.get("tokens", 0))
    return max(1, min(ctx.look_ahead_tokens, left))


def _generate(stage: str, state: dict[str, Any], env: Env) -> Ask:
    return Ask(
        stage,
        generation_prompt(state, env),
        message=True,
        options=logprob_options(env, max_tokens=reply_budget(state, env.ctx), stop=STOP),
    )


def _tokens(stage: str, reply: BaseMessage, env: Env) -> list[Token]:
    return token_logprobs(reply, method=METHOD, model=env.deps.model_for(stage))


# --- the steps ----------------------------------------------------------------------------------


def merged(results: Sequence[Sequence[Passage]], k: int) -> list[Passage]:
    """Several queries' passages as one list of ``k`` (``QueryAgent.retrieve``, nested
    queries): rank 1 of every query, then rank 2, ..., each passage once."""
    out: list[Passage] = []
    seen: set[str] = set()
    for rank in range(max((len(r) for r in results), default=0)):
        for found in results:
            if rank < len(found) and found[rank]["id"] not in seen:
                seen.add(found[rank]["id"])
                out.append(found[rank])
    return out[:k]


def retrieve(state: dict[str, Any], env: Env) -> StepGen:
    """Retrieval. At first with the input x itself (``look_ahead_pre_retrieval="first"``; the
    paper: q_1 = x), and for each exemplar with its question (``use_ctx_for_examplars="ret"``:
    the original retrieves the exemplars' passages from the same index; ``demo_top_k`` of them,
    by default ``top_k``, as the original's one ``topk``). Later with the pending look-ahead's
    query (or its questions: their passages merged, ``top_k`` in all). The new passages
    replace the old ones (``ctx_increase="replace"``)."""
    pending = state.get("pending")
    k = env.ctx.top_k
    if pending is None:
        demos = _demonstrations(state, env)  # an unknown task fails before any search
        demo_k = env.ctx.top_k if env.ctx.demo_top_k is None else env.ctx.demo_top_k
        searches: list[Effect] = [Search(state["question"], k)]
        searches += [Search(demo.question, demo_k) for demo in demos] if demo_k else []
        results: list[list[Passage]] = yield searches
        found = results[0]
        demo_passages = [[p["text"] for p in r] for r in results[1:]] or [[] for _ in demos]
        queries = [state["question"]]
        update: dict[str, Any] = {"demo_passages": demo_passages, "retrievals": 0}
    else:
        queries = list(pending["queries"])
        results = yield [Search(query, k) for query in queries]
        found = merged(results, k)
        update = {
            "retrievals": state.get("retrievals", 0) + 1,
            "pending": pending | {"new_passage_ids": [p["id"] for p in found]},
        }
    env.emit(
        {
            "type": "passages",
            "step": state.get("steps", 0),
            "initial": pending is None,
            "queries": queries,
            "passages": [{"id": p["id"], "title": p["title"]} for p in found],
        }
    )
    return update | {
        "passages": found,
        "passage_ids": [p["id"] for p in found],
        "query_log": queries,
    }


def look_ahead(state: dict[str, Any], env: Env) -> StepGen:
    """The look-ahead: the next sentence ŝ_t from the current passages. If every token's
    probability is above θ it is accepted as s_t; otherwise the query for retrieval is ŝ_t with
    its tokens at most β masked (or, with ``query="questions"``, one generated question per
    low-confidence term), and the sentence is left pending for ``regenerate``. A masked query
    with nothing left (every token at most β) retrieves nothing: the look-ahead is accepted, as
    FlashRAG does (the original then retrieves nothing and regenerates the same sentence)."""
    t = state.get("steps", 0)
    reply = yield _generate("look_ahead", state, env)
    sentence = first_sentence(_tokens("look_ahead", reply, env))
    low = [token for token in sentence.tokens if not is_confident([token], env.ctx.threshold)]
    probs = [probability(token) for token in sentence.tokens]
    decision: dict[str, Any] = {
        "look_ahead": sentence.text,
        "min_prob": round(min(probs), 4) if probs else None,
        "low_confidence": [token.text for token in low],
    }
    calls = 1
    queries: list[str] = []
    if low and sentence.text:
        if env.ctx.query == "questions":
            queries, asked = yield from questions(state, env, sentence)
            calls += asked
        else:
            queries = [q] if (q := masked_query(sentence.tokens, env.ctx.mask_threshold)) else []
    env.emit({"type": "look_ahead", "step": t, **decision, "queries": queries})
    if queries:
        return {"pending": decision | {"queries": queries, "llm_calls": calls}}
    return accept(state, sentence, reply, decision | {"retrieved": False, "llm_calls": calls})


def questions(
    state: dict[str, Any], env: Env, sentence: Sentence
) -> Generator[list[Effect], list[str], tuple[list[str], int]]:
    """The explicit queries (``mask_method="wholeterm-askquestion"``): for each low-confidence
    term, the questioner asks a question whose answer is the term, given the text so far and
    the look-ahead; only replies ending in "?" are kept. Without a term (no token at most β)
    the query is the sentence itself, as in the original. Returns the queries and the number
    of calls made."""
    terms = low_confidence_terms(sentence.tokens, env.ctx.mask_threshold)
    if not terms:
        return [sentence.text], 0
    context = generation(state.get("sentences") or []).lstrip()
    replies: list[str] = yield [
        Ask(
            "ask_question",
            env.prompts.ask_question.format(
                context=context, sentence=(" " + sentence.text).rstrip(), term=term.strip('"')
            ),
        )
        for term in terms
    ]
    asked = [reply.strip() for reply in replies if reply.strip().endswith("?")]
    if not asked:
        fell_back("question")
        return [sentence.text], len(terms)
    return asked, len(terms)


def regenerate(state: dict[str, Any], env: Env) -> StepGen:
    """The sentence s_t regenerated from the passages the look-ahead's query retrieved
    (accepted as it comes: the original does not look at its confidence again)."""
    pending = dict(state["pending"])
    reply = yield _generate("regenerate", state, env)
    sentence = first_sentence(_tokens("regenerate", reply, env))
    pending["llm_calls"] = pending.get("llm_calls", 1) + 1
    env.emit({"type": "sentence", "step": state.get("steps", 0), "sentence": sentence.text})
    return accept(state, sentence, reply, pending | {"retrieved": True})


def accept(
    state: dict[str, Any], sentence: Sentence, reply: BaseMessage, entry: dict[str, Any]
) -> dict[str, Any]:
    """s_t joins the answer: the step's trace entry, the tokens generated so far (the
    original's max_generation_len counts them), and whether the answer is complete."""
    t = state.get("steps", 0)
    sentences = [*(state.get("sentences") or []), sentence.text]
    return {
        "sentences": sentences,
        "generation": generation(sentences).strip(),
        "steps": t + 1,
        "tokens": state.get("tokens", 0) + len(sentence.tokens),
        "finished": finished(sentence, reply),
        "pending": None,
        "trace": [
            {
                "step": t,
                **entry,
                "passage_ids": [p["id"] for p in state.get("passages") or []],
                "sentence": sentence.text,
            }
        ],
    }


# --- the answer -----------------------------------------------------------------------------------

# prep.py's eval: the answer after "answer is" (2wikihop), yes/no (strategyqa); ASQA's prediction
# without the prefix of its last part (prefix_to_remove), else whole
_ANSWER_IS = {
    "multihop": re.compile(r"answer is (.*)"),
    "strategyqa": re.compile(r"answer is (yes|no)\."),
}
_ASQA_PREFIXES = (
    re.compile(r"The answers to all interpretations are\: (.*)$"),
    re.compile(r"The answer to this interpretation is\: (.*)$"),
    re.compile(r"The answer to this interpretation is (.*)$"),
)


def final_answer(task: str, text: str) -> str:
    """The answer in the generation, read as the original's evaluation (prep.py) reads it."""
    text = text.strip()
    if task == "asqa":
        for prefix in _ASQA_PREFIXES:
            if found := prefix.search(text):
                return found.group(1).strip()
        return text
    match = _ANSWER_IS[task].search(text)
    if match is None:
        fell_back("answer_is")
        return text
    return match.group(1).strip().removesuffix(".").strip()


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """The answer read from the generation (no model call: FLARE's answer is what it
    generated). It reaches ``messages`` (and the messages stream, once) as an AI message."""
    task = state.get("task") or env.ctx.task
    text = final_answer(task, state.get("generation") or "")
    env.emit({"type": "answer", "answer": text})
    return {
        "answer": text,
        "question": state["question"],
        "messages": [AIMessage(text, id=f"flare-{uuid.uuid4()}")],
    }
    yield  # a step is a generator; this one makes no call
