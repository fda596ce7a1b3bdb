"""Self-RAG's steps (Asai et al., ICLR 2024, Algorithm 1, short-form inference as the authors'
``retrieval_lm/run_short_form.py`` runs it, ``call_model_rerank_w_scores_batch``): the
retrieval decision, one generation per passage with its critique scores (or one generation
without retrieval), and the answer. Retrieval is the shared step. One model (the Self-RAG LM)
makes every call; the stages are ``retrieve_token`` and ``generate``.

Reflection tokens (``retrieval_lm/utils.py``) are read from the replies' token
log-probabilities (``Ask(..., message=True, options={"logprobs": True, "top_logprobs": n})``;
langchain-openai puts them in ``reply.response_metadata["logprobs"]["content"]``: per generated
token its text, its log-probability and the ``top_logprobs`` listed at that position). For a
token t at a position, p(t) = exp(its listed log-probability), and exp(-100) when the endpoint
did not list it (the original's -100 for a token outside the 5,000 it asks vLLM for; an
OpenAI-compatible endpoint lists at most ``top_logprobs``, 20 by default).

The scores (run_short_form.py; paper, Section 3.3), for the generation y conditioned on d:

    retrieval decision   p([Retrieval]) / (p([Retrieval]) + p([No Retrieval])) > threshold,
                         at the first position of the decision call's reply
    s_rel  relevance     p([Relevant]) / (p([Relevant]) + p([Irrelevant])), y's first position
    s_sup  support       p(FS)/S + 0.5 p(PS)/S, S = p(FS) + p(PS) + p(NS), at the first
                         position whose generated token is one of [Fully supported] (FS),
                         [Partially supported] (PS), [No support / Contradictory] (NS); 0 if none
    s_use  utility       sum_i u_i p([Utility:i]) / S_U, u = (-1, -0.5, 0, 0.5, 1), S_U the sum
                         of the five, at the first generated utility token; 0 if none
    s_seq  sequence      exp(mean log-probability of y's tokens) (use_seqscore: the paper's
                         p(y_t | x, d, y_<t), length-normalised as the code does)
    score(y)             s_seq + w_rel s_rel + w_sup s_sup + w_use s_use

The answer is the best-scored generation (the first on a tie: the original's stable sort),
with the reflection tokens removed (``short_form``).

What the code leaves open or does otherwise, and what we decided:
- the retrieval decision: the original divides the two *log*-probabilities
  (``score_dict[tok] = float(prob)`` on vLLM's log-probabilities), which inverts the test at
  the extremes (p([Retrieval]) = 0.9 against 0.1 gives 0.04, no retrieval) and makes
  threshold 0.2 retrieve almost always (AkariAsai/self-rag issue #45: "the retrieval frequency
  is 100%"); we divide the probabilities, as the paper states it ("the probability of
  generating [Retrieval] normalized over all output tokens in Retrieve") and as FlashRAG does;
- the decision call generates one token (FlashRAG's ``max_tokens=1``): the original generates
  ``max_new_tokens`` there but reads only the first position and discards the text (the
  no-retrieval answer is a second call with "[No Retrieval]" appended, as here);
- mode ``no_retrieval``: the original still sends the decision call and ignores it; we send
  none. Mode ``always_retrieve`` sends none, as the original;
- retrieval that finds no passage (the original then fails on an unbound ``pred``): the
  "[No Retrieval]" generation answers;
- the answer: the original strips the reflection tokens, "</s>", "<|endoftext|>" and line
  breaks from the no-retrieval answer only (``postprocess_answer_option_conditioned``) and
  returns the retrieval-branch generation raw (its metric, ``match``, is a substring test), and
  drops a leading "#" or ":" from either; we clean both the same way and also remove
  "[Continue to Use Evidence]" (missing from its ``control_tokens``) and surrounding spaces
  (vLLM writes a space between special tokens);
- closed-set tasks (``closed``: FEVER, ARC-Challenge sum the scores of equal answers) and the
  long-form segment-level beam search (``run_long_form_static.py``) are not implemented:
  task multihop only.

A model that is not a Self-RAG model is stopped with one ConfigError naming the method and the
model, never answered some other way:
- a reply without log-probabilities, where the method reads them (the decision call, the
  per-passage generations);
- per-passage generations none of which shows any reflection token, in its text or among the
  listed log-probabilities; likewise the no-retrieval generation, when the decision call had
  listed no Retrieve token either. (One position without the tokens is not that error: a
  Self-RAG model may begin with text and put [Retrieval] outside the top 20.)

Replies without the expected tokens at a position take the original's value for unlisted
tokens, counted by kind in the state's ``fallbacks`` (noterag.core.parsing.fell_back):

| kind            | a reply without ...                               | fallback                          |
|-----------------|---------------------------------------------------|-----------------------------------|
| retrieval_token | [Retrieval] or [No Retrieval] listed at the first | both at exp(-100): the score is   |
|                 | position of the decision call                     | 0.5 (retrieve when threshold<0.5) |
| relevance       | [Relevant] or [Irrelevant] listed at the first    | both at exp(-100): s_rel = 0.5    |
|                 | position of a generation                          |                                   |

A generation without a support or utility token scores 0 for it without a fallback: that is
the format's own (Self-RAG writes no support token after an [Irrelevant] passage).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage

from noterag.base.errors import ConfigError
from noterag.core.parsing import fell_back
from noterag.core.state import Passage
from noterag.core.step import Ask, Env, StepGen, reply_text

METHOD = "self-rag"

# --- the reflection tokens (AkariAsai/self-rag retrieval_lm/utils.py) -----------------------------

RETRIEVAL = "[Retrieval]"
NO_RETRIEVAL = "[No Retrieval]"
CONTINUE = "[Continue to Use Evidence]"
RELEVANT, IRRELEVANT = "[Relevant]", "[Irrelevant]"
# ground_tokens_names, in the order the support score weighs them (1, 0.5, 0)
SUPPORT = ("[Fully supported]", "[Partially supported]", "[No support / Contradictory]")
# utility_tokens_names, [Utility:1] .. [Utility:5]
UTILITY = tuple(f"[Utility:{i}]" for i in range(1, 6))
UTILITY_VALUES = (-1.0, -0.5, 0.0, 0.5, 1.0)
SUPPORT_VALUES = (1.0, 0.5, 0.0)
# control_tokens (what the original removes from an answer), with CONTINUE, which it misses
CONTROL_TOKENS = (
    *SUPPORT,
    NO_RETRIEVAL,
    RETRIEVAL,
    IRRELEVANT,
    RELEVANT,
    "<paragraph>",
    "</paragraph>",
    *UTILITY,
    CONTINUE,
)
REFLECTION = frozenset(
    {RETRIEVAL, NO_RETRIEVAL, CONTINUE, RELEVANT, IRRELEVANT, *SUPPORT, *UTILITY}
)
# the original's log-probability for a token the model's listing does not include
NOT_LISTED = -100.0
# run_short_form.py's --max_new_tokens in the README's QA command
MAX_NEW_TOKENS = 100


# --- the replies' log-probabilities ---------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """One generated token as the endpoint lists it: its text, its log-probability, and the
    log-probabilities listed at its position (by text without surrounding spaces; the token
    itself included)."""

    text: str
    logprob: float
    listed: Mapping[str, float]

    def p(self, token: str) -> float:
        """p(token) at this position: exp(-100) when not listed (the original's value)."""
        return math.exp(self.listed.get(token, NOT_LISTED))


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return NOT_LISTED


def read_tokens(reply: AIMessage) -> list[Token] | None:
    """The reply's generated tokens with their log-probabilities, from langchain-openai's
    ``response_metadata["logprobs"]["content"]``; None when the reply carries none."""
    data = reply.response_metadata.get("logprobs")
    content = data.get("content") if isinstance(data, Mapping) else None
    if not isinstance(content, list):
        return None
    tokens = []
    for entry in content:
        if not isinstance(entry, Mapping):
            continue
        text, logprob = str(entry.get("token", "")), _number(entry.get("logprob"))
        listed: dict[str, float] = {}
        for alt in [*(entry.get("top_logprobs") or []), {"token": text, "logprob": logprob}]:
            if isinstance(alt, Mapping):
                key, value = str(alt.get("token", "")).strip(), _number(alt.get("logprob"))
                listed[key] = max(value, listed.get(key, NOT_LISTED))
        tokens.append(Token(text, logprob, listed))
    return tokens


def model_label(env: Env, stage: str, reply: AIMessage) -> str:
    """The model's name for an error message: the endpoint's, else the model object's."""
    model = env.deps.model_for(stage)
    name = (
        reply.response_metadata.get("model_name")
        or getattr(model, "model_name", None)
        or getattr(model, "model", None)
    )
    return str(name) if name else type(model).__name__


def require_tokens(reply: AIMessage, env: Env, stage: str, what: str) -> list[Token]:
    """The reply's tokens, or the one error saying the model returned no log-probabilities."""
    tokens = read_tokens(reply)
    if tokens is None:
        raise ConfigError(
            f"{METHOD} reads its reflection tokens from token log-probabilities, and model "
            f"{model_label(env, stage, reply)!r} returned none for {what}: serve a Self-RAG "
            "model on an endpoint that returns logprobs / top_logprobs (vLLM's OpenAI-compatible "
            "server does)"
        )
    return tokens


def not_a_selfrag_model(env: Env, stage: str, reply: AIMessage, where: str) -> ConfigError:
    return ConfigError(
        f"{METHOD} needs a Self-RAG-trained model (e.g. selfrag/selfrag_llama2_7b), and model "
        f"{model_label(env, stage, reply)!r} wrote no reflection token ([Relevant], "
        f"[Fully supported], [Utility:5], ...) in {where}; a Self-RAG model served by vLLM "
        "must keep its special tokens (skip_special_tokens false)"
    )


def shows_reflection(text: str, tokens: Iterable[Token] = ()) -> bool:
    """Whether a reply shows any reflection token: in its text, or among the tokens listed at
    any of its positions."""
    return any(t in text for t in REFLECTION) or any(
        not REFLECTION.isdisjoint(token.listed) for token in tokens
    )


# --- the scores -----------------------------------------------------------------------------------


def retrieve_score(tokens: Sequence[Token]) -> tuple[float, bool]:
    """p([Retrieval]) / (p([Retrieval]) + p([No Retrieval])) at the first position, and whether
    either token was listed there (not listed: both exp(-100), the score 0.5, counted
    "retrieval_token")."""
    first = tokens[0] if tokens else Token("", NOT_LISTED, {})
    listed = RETRIEVAL in first.listed or NO_RETRIEVAL in first.listed
    if not listed:
        fell_back("retrieval_token")
    p_yes, p_no = first.p(RETRIEVAL), first.p(NO_RETRIEVAL)
    return p_yes / (p_yes + p_no), listed


@dataclass(frozen=True)
class Critique:
    """One generation's critique scores (run_short_form.py), before the weights."""

    relevance: float  # s_rel
    support: float  # s_sup (0: no support token generated)
    utility: float  # s_use (0: no utility token generated)
    sequence: float  # s_seq = exp(mean token log-probability)
    reflection: list[str]  # the reflection tokens generated, in order


def _first(tokens: Sequence[Token], group: Sequence[str]) -> Token | None:
    return next((t for t in tokens if t.text.strip() in group), None)


def _expected(at: Token, group: Sequence[str], values: Sequence[float]) -> float:
    probs = [at.p(t) for t in group]
    total = sum(probs)
    return sum(v * p / total for v, p in zip(values, probs, strict=True))


def critique(tokens: Sequence[Token]) -> Critique:
    """s_rel, s_sup, s_use and s_seq of one generation (the module docstring's formulas)."""
    first = tokens[0] if tokens else Token("", NOT_LISTED, {})
    if RELEVANT not in first.listed and IRRELEVANT not in first.listed:
        fell_back("relevance")
    p_rel, p_irr = first.p(RELEVANT), first.p(IRRELEVANT)
    at_support, at_utility = _first(tokens, SUPPORT), _first(tokens, UTILITY)
    mean = sum(t.logprob for t in tokens) / max(len(tokens), 1)
    return Critique(
        relevance=p_rel / (p_rel + p_irr),
        support=_expected(at_support, SUPPORT, SUPPORT_VALUES) if at_support else 0.0,
        utility=_expected(at_utility, UTILITY, UTILITY_VALUES) if at_utility else 0.0,
        sequence=math.exp(mean),
        reflection=[t.text.strip() for t in tokens if t.text.strip() in REFLECTION],
    )


def segment_score(c: Critique, ctx: Any) -> float:
    """score(y) = s_seq (use_seqscore) + w_rel s_rel + w_sup s_sup + w_use s_use."""
    sequence = c.sequence if ctx.use_seqscore else 0.0
    return sequence + ctx.w_rel * c.relevance + ctx.w_sup * c.support + ctx.w_use * c.utility


def best(scores: Sequence[float]) -> int:
    """The index of the best score, the first on a tie (the original's stable sort)."""
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def short_form(text: str) -> str:
    """The answer of a generation (``postprocess_answer_option_conditioned`` and main's
    "#" / ":" rule): reflection tokens, "</s>", "<|endoftext|>" and line breaks removed,
    surrounding spaces stripped (ours), then one leading "#" or ":" dropped."""
    for token in (*CONTROL_TOKENS, "</s>", "<|endoftext|>", "\n"):
        text = text.replace(token, "")
    text = text.strip()
    return text[1:].strip() if text[:1] in ("#", ":") else text


# --- the calls ------------------------------------------------------------------------------------


def check_task(task: str) -> None:
    """Self-RAG's short-form inference answers short-answer questions (task multihop) only."""
    if task != "multihop":
        raise ConfigError(
            f"{METHOD} runs the paper's short-form QA inference (task multihop), not {task!r}: "
            "its long-form segment beam search and closed-set scoring are not implemented"
        )


def base_prompt(state: Mapping[str, Any], env: Env) -> str:
    """PROMPT_DICT["prompt_no_input"] with the instruction (for QA: the question)."""
    instruction = env.prompts.instruction.format(question=state["question"])
    return str(env.prompts.prompt_no_input.format(instruction=instruction))


def call_options(env: Env, stage: str, *, max_tokens: int, logprobs: bool) -> dict[str, Any]:
    """Per-call model arguments: the token cap, the log-probabilities where the method reads
    them, and vLLM's ``skip_special_tokens`` (merged into the model's own ``extra_body``): with
    vLLM's default (true) the reflection tokens vanish from the text and the listings."""
    options: dict[str, Any] = {"max_tokens": max_tokens}
    if logprobs:
        options |= {"logprobs": True, "top_logprobs": env.ctx.top_logprobs}
    if env.ctx.skip_special_tokens is not None:
        own = getattr(env.deps.model_for(stage), "extra_body", None) or {}
        options["extra_body"] = {**own, "skip_special_tokens": env.ctx.skip_special_tokens}
    return options


def answer_tokens(ctx: Any) -> int:
    return int(ctx.max_tokens) if ctx.max_tokens is not None else MAX_NEW_TOKENS


# --- steps ----------------------------------------------------------------------------------------


def predict_retrieve(state: dict[str, Any], env: Env) -> StepGen:
    """Algorithm 1, line 2: M predicts Retrieve given x. Mode ``adaptive_retrieval``: one call
    generating one token, whose listed probabilities of [Retrieval] and [No Retrieval] decide
    against the threshold; ``always_retrieve`` / ``no_retrieval``: no call."""
    check_task(state.get("task") or env.ctx.task)
    ctx = env.ctx
    score: float | None = None
    listed: bool | None = None
    calls = 0
    if ctx.mode == "adaptive_retrieval":
        reply = yield Ask(
            "retrieve_token",
            base_prompt(state, env),
            message=True,
            options=call_options(env, "retrieve_token", max_tokens=1, logprobs=True),
        )
        tokens = require_tokens(reply, env, "retrieve_token", "the retrieval decision")
        score, listed = retrieve_score(tokens)
        retrieved, calls = score > ctx.threshold, 1
    else:
        retrieved = ctx.mode == "always_retrieve"
    env.emit(
        {
            "type": "retrieval_decision",
            "step": 0,
            "mode": ctx.mode,
            "retrieve": retrieved,
            "score": score,
            "threshold": ctx.threshold,
        }
    )
    entry: dict[str, Any] = {"step": 0, "mode": ctx.mode, "retrieved": retrieved}
    if score is not None:
        entry |= {"retrieve_score": score, "threshold": ctx.threshold, "listed": listed}
    return {
        "retrieved": retrieved,
        "retrieve_score": score,
        "retrieval_token_listed": listed,
        "trace": [entry | {"llm_calls": calls}],
    }


def route(state: Mapping[str, Any]) -> str:
    """After the decision: retrieve, or generate without retrieval (Algorithm 1, lines 3 / 8)."""
    return "retrieve" if state.get("retrieved") else "generate"


def generate(state: dict[str, Any], env: Env) -> StepGen:
    """Algorithm 1, lines 4-7 / 8-10. With passages: one generation per passage d (prompt +
    "[Retrieval]<paragraph>title\\ntext</paragraph>"), all concurrently, each scored by its
    reflection tokens (relevance, support, utility) and its sequence probability; the best is
    chosen. Without retrieval (or when retrieval found nothing): one generation after
    "[No Retrieval]"."""
    prompt, passages = base_prompt(state, env), list(state.get("passages") or [])
    if state.get("retrieved") and passages:
        return (yield from _with_passages(state, env, prompt, passages))
    return (yield from _without_retrieval(state, env, prompt))


def _with_passages(
    state: dict[str, Any], env: Env, prompt: str, passages: list[Passage]
) -> StepGen:
    ctx = env.ctx
    replies: list[AIMessage] = yield [
        Ask(
            "generate",
            prompt + env.prompts.paragraph.format(title=p["title"], text=p["text"]),
            message=True,
            options=call_options(env, "generate", max_tokens=answer_tokens(ctx), logprobs=True),
        )
        for p in passages
    ]
    what = f"the generation for passage {{}} of {len(passages)}"
    tokens = [require_tokens(r, env, "generate", what.format(i)) for i, r in enumerate(replies, 1)]
    texts = [reply_text(r) for r in replies]
    if not any(shows_reflection(x, t) for x, t in zip(texts, tokens, strict=True)):
        raise not_a_selfrag_model(
            env, "generate", replies[0], f"its {len(replies)} per-passage generation(s)"
        )
    critiques = [critique(t) for t in tokens]
    scores = [segment_score(c, ctx) for c in critiques]
    chosen = best(scores)
    segments = [
        {
            "passage_id": p["id"],
            "title": p["title"],
            "text": text,
            "answer": short_form(text),
            "reflection": c.reflection,
            "relevance": c.relevance,
            "support": c.support,
            "utility": c.utility,
            "sequence": c.sequence,
            "score": score,
        }
        for p, text, c, score in zip(passages, texts, critiques, scores, strict=True)
    ]
    env.emit({"type": "segments", "step": 1, "segments": segments, "chosen": chosen})
    return {
        "segments": segments,
        "chosen": chosen,
        "trace": [
            {
                "step": i + 1,
                "passage_ids": [s["passage_id"]],
                "segment": s["text"],
                "reflection": s["reflection"],
                "relevance": s["relevance"],
                "support": s["support"],
                "utility": s["utility"],
                "sequence": s["sequence"],
                "score": s["score"],
                "chosen": i == chosen,
                "llm_calls": 1,
            }
            for i, s in enumerate(segments)
        ],
    }


def _without_retrieval(state: dict[str, Any], env: Env, prompt: str) -> StepGen:
    reply: AIMessage = yield Ask(
        "generate",
        prompt + env.prompts.no_retrieval.format(),
        message=True,
        options=call_options(env, "generate", max_tokens=answer_tokens(env.ctx), logprobs=False),
    )
    text = reply_text(reply)
    # The decision call listed no Retrieve token: this reply is the last chance to see one.
    if state.get("retrieval_token_listed") is False and not shows_reflection(text):
        raise not_a_selfrag_model(
            env, "generate", reply, "the retrieval decision or the generation without retrieval"
        )
    segment = {
        "passage_id": None,
        "title": None,
        "text": text,
        "answer": short_form(text),
        "reflection": _reflection_in(text),
        "relevance": None,
        "support": None,
        "utility": None,
        "sequence": None,
        "score": None,
    }
    env.emit({"type": "segments", "step": 1, "segments": [segment], "chosen": 0})
    return {
        "segments": [segment],
        "chosen": 0,
        "trace": [
            {
                "step": 1,
                "segment": text,
                "reflection": segment["reflection"],
                "chosen": True,
                "llm_calls": 1,
            }
        ],
    }


def _reflection_in(text: str) -> list[str]:
    """The reflection tokens in a text, in order of appearance."""
    positions = []
    for token in REFLECTION:
        start = text.find(token)
        while start != -1:
            positions.append((start, token))
            start = text.find(token, start + len(token))
    return [token for _, token in sorted(positions)]


def predict(state: dict[str, Any], env: Env) -> StepGen:
    """The answer: the chosen generation's text with the reflection tokens removed. No model
    call: the answer reaches ``messages`` (and the messages stream, once) as an AI message
    written by this step (the generations carry reflection tokens, so none of them streams)."""
    segments = state.get("segments") or []
    text = segments[state.get("chosen") or 0]["answer"] if segments else ""
    env.emit({"type": "answer", "answer": text})
    return {
        "answer": text,
        "question": state["question"],
        "messages": [AIMessage(text, id=f"self-rag-{uuid.uuid4()}")],
    }
    yield  # a step is a generator; this one makes no call
