"""IRCoT's steps (Trivedi et al., 2023): retrieve, reason (one chain-of-thought sentence per
call) and the answer (the concluding sentence's, or the IRCoT QA reader's). Each follows the
authors' code, StonyBrookNLP/ircot at 3c1820f (``commaqa/inference/ircot.py``; the configs
``base_configs/ircot_qa_codex_<dataset>.jsonnet``); where noterag differs, the step says so.

Model stages: ``reason`` (role ``reasoner``) and ``answer`` (the QA reader, role ``reader``).
Both calls stop at a newline, as the original's generator does (``GPT3Generator``,
``stop=["\\n"]``).

Parse fallbacks (counted in the state's ``fallbacks``, noterag.core.parsing.fell_back):

| kind         | a reply without ...                 | fallback                                 |
|--------------|-------------------------------------|------------------------------------------|
| cot_sentence | any sentence (empty reasoning reply)| the loop stops, the QA reader answers    |
|              |                                     | (the original exits on an empty sentence)|
| answer_is    | "answer is" (the QA reader's reply) | the whole reply, last full stop dropped  |
|              |                                     | (the original's match_all_on_failure)    |

Demonstrations: the prompt set's (noterag.prompts.ircot), then the original's two length rules,
both with the budget ``prompt_tokens`` (the original: 8000 tokens, code-davinci-002's window)
and 300 tokens for the reply (its ``max_tokens``):
- when read (``read_prompt``, ``removal_method="last_first"``): while the demonstrations, plus
  the longest of them again (its estimate of the test example) and 300, exceed the budget, the
  last one is dropped;
- at each call (``GPT3Generator`` -> ``fit_prompt_into_given_limit``, ``remove_method="first"``):
  while the demonstrations, the actual test example and 300 reach the budget, the first one is
  dropped (so the prompt shrinks from the front as paragraphs accumulate).
The original counts GPT-2 tokens; noterag cannot ship that vocabulary, so it estimates them
(``approx_tokens``): the larger of UTF-8 bytes / 3.3 and 1.35 x GPT-2's pre-tokens (words,
numbers, punctuation runs). Measured with SmolLM2's byte-level BPE (a GPT-2-like vocabulary) on
every demonstration of the three files, the estimate is at most 3% below the true count of one
demonstration and about 15% above it over all of them: the prompt stays within the budget (an
8k-token model gets the default run), keeping a demonstration or two fewer than the original
may have. ``max_demos`` caps their number first; ``prompt_tokens=None`` turns both rules off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from langchain_core.messages import AIMessage

from noterag.core.parsing import fell_back
from noterag.core.prompt import Prompt
from noterag.core.state import Passage
from noterag.core.step import Ask, Env, Search, StepGen, reply_text
from noterag.prompts import ircot as ircot_prompts

# --- the original's helpers (commaqa/inference/ircot.py) --------------------------------------

# is_reasoning_sentence: a sentence that draws a conclusion names nothing to retrieve
_STARTERS = ("thus ", "thus,", "so ", "so,", "that is,", "therefore", "hence")
_ARITHMETIC = re.compile(
    r"(.*)(\d[\d,]*\.?\d+|\d+) ([+-]) (\d[\d,]*\.?\d+|\d+) = (\d[\d,]*\.?\d+|\d+)(.*)"
)
# remove_wh_words
_WH_WORDS = frozenset({"who", "what", "when", "where", "why", "which", "how", "does", "is"})
# the exit controller's answer_extractor_regex (re.match: from the sentence's start)
_ANSWER_IS = re.compile(r".* answer is:? (.*)\.?")
# paragraphs longer than this are skipped when retrieved (dont_skip_long_paras=False)
LONG_PARAGRAPH_WORDS = 600
# para_to_text's max_para_num_words
MAX_PARAGRAPH_WORDS = 350
# the reply length both length rules reserve (GPT3Generator max_tokens; read_prompt's
# estimated_generation_length)
REPLY_TOKENS = 300
STOP = ["\n"]


def is_reasoning_sentence(sentence: str) -> bool:
    """Whether ``sentence`` reasons rather than states a fact: it starts with "thus", "so",
    "that is,", "therefore" or "hence", or is an addition or subtraction."""
    if sentence.lower().startswith(_STARTERS):
        return True
    return bool(_ARITHMETIC.match(sentence))


def remove_wh_words(text: str) -> str:
    """The query without question words (split on single spaces, as the original does)."""
    return " ".join(word for word in text.split(" ") if word.strip().lower() not in _WH_WORDS)


def retrieval_query(question: str, cot: Sequence[str]) -> str:
    """``query_source="question_or_last_generated_sentence"``: the last sentence of the chain
    of thought that is not a reasoning sentence, else the question; wh-words removed."""
    facts = [sentence for sentence in cot if not is_reasoning_sentence(sentence)]
    last = facts[-1].strip() if facts else ""
    return remove_wh_words(last or question)


def para_to_text(passage: Passage, max_words: int = MAX_PARAGRAPH_WORDS) -> str:
    """One paragraph as the prompts show it: ``Wikipedia Title: <title>\\n<text>``, the text cut
    to its first ``max_words`` words (split on single spaces so that newlines survive)."""
    text = " ".join(passage["text"].split(" ")[:max_words])
    if text.strip().startswith("Wikipedia Title: "):
        return text.strip()
    return "Wikipedia Title: " + passage["title"] + "\n" + text.strip()


# A sentence ends at ., ! or ? (and the closing quotes or brackets after it) before whitespace.
# The original splits with spaCy (en_core_web_sm); this rule keeps abbreviations and initials
# ("St. John's", "J. K. Rowling") inside their sentence.
_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*(?=\s)")
_ABBREVIATION = re.compile(
    r"(?:^|\s)(?:[A-Z]|Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Mt|Ft|No|vs|etc|e\.g|i\.e|U\.S|U\.K)\."
    r"[\"'”’)\]]*$"
)


def first_sentence(reply: str) -> str:
    """The first sentence of ``reply`` (the original keeps only that: one reasoning step)."""
    text = reply.strip()
    for end in _END.finditer(text):
        sentence = text[: end.end()]
        if not _ABBREVIATION.search(sentence):
            return sentence
    return text


def concluded_answer(sentence: str) -> str | None:
    """The answer a concluding sentence gives ("... So the answer is: X."), its last full stop
    dropped; None when the sentence does not conclude (the loop goes on)."""
    match = _ANSWER_IS.match(sentence)
    if match is None:
        return None
    answer = match.group(1)
    return answer.removesuffix(".")


def reader_answer(reply: str) -> str:
    """The QA reader's answer (``extract_answer``): what follows "answer is" in its reply; a
    reply without it is the answer as a whole (``match_all_on_failure``, counted as
    ``answer_is``). Surrounding double quotes and the last full stop are dropped."""
    text = reply.strip()
    if text.startswith('"') and text.endswith('"') and len(text) > 1:
        text = text[1:-1]
    match = _ANSWER_IS.match(text)
    if match is None:
        fell_back("answer_is")
        match = re.match(r"(.*)", text)
        assert match is not None  # (.*) matches every string
    answer = match.group(1)
    return answer.removesuffix(".")


# --- demonstrations and their length rules ----------------------------------------------------

# GPT-2's pre-tokenizer (its regex, with \p{L} as [^\W\d_] and \p{N} as \d): every pre-token is
# at least one BPE token.
_PRETOKEN = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
# the estimate's two rates (module docstring: measured on the demonstration files)
BYTES_PER_TOKEN = 3.3
TOKENS_PER_PRETOKEN = 1.35


def approx_tokens(text: str) -> int:
    """An estimate of ``text``'s GPT-2 token count, rather above than below it (module
    docstring)."""
    by_bytes = len(text.encode("utf-8")) / BYTES_PER_TOKEN
    by_words = len(_PRETOKEN.findall(text)) * TOKENS_PER_PRETOKEN
    return math.ceil(max(by_bytes, by_words))


@cache
def selected_demonstrations(
    dataset: str,
    prompt_set: int,
    max_demos: int | None,
    prompt_tokens: int | None,
    files: str = ircot_prompts.IRCOT_FILES,
) -> tuple[str, ...]:
    """The demonstrations a run reads: the prompt set's (in the demonstration files ``files``),
    at most ``max_demos``, then the last ones dropped while ``read_prompt``'s estimate exceeds
    ``prompt_tokens`` (module docstring)."""
    kept = ircot_prompts.demonstrations(dataset, prompt_set, files)
    if max_demos is not None:
        kept = kept[:max_demos]
    if prompt_tokens is None or len(kept) <= 1:  # read_prompt leaves a lone example as it is
        return tuple(kept)
    lengths = [approx_tokens(text) for text in kept]
    while lengths and sum(lengths) + max(lengths) + REPLY_TOKENS > prompt_tokens:
        kept.pop()
        lengths.pop()
    return tuple(kept)


def fitted(prompt: Prompt, demonstrations: Sequence[str], budget: int | None, **values: str) -> str:
    """``prompt`` filled, its demonstrations joined by ``"\\n\\n\\n"``; with a ``budget``, the
    first demonstrations dropped while they, the rest of the prompt and the reply reach it."""
    kept = list(demonstrations)
    if budget is not None and "demonstrations" in prompt.slots:
        test = approx_tokens(prompt.format(**(values | {"demonstrations": ""})))
        sizes = [approx_tokens(text) for text in kept]
        while sizes and sum(sizes) + test + REPLY_TOKENS >= budget:
            kept.pop(0)
            sizes.pop(0)
    filled = values | {"demonstrations": "\n\n\n".join(kept)}
    return prompt.format(**{slot: filled[slot] for slot in prompt.slots})


def _demonstrations(env: Env) -> tuple[str, ...]:
    ctx = env.ctx
    return selected_demonstrations(
        ctx.demos,
        ctx.prompt_set,
        ctx.max_demos,
        ctx.prompt_tokens,
        ircot_prompts.DEMO_FILES[ctx.demo_files],
    )


def _paragraphs(passages: Sequence[Passage]) -> str:
    return "\n\n".join(para_to_text(p) for p in passages)


# --- the steps ------------------------------------------------------------------------------


def retrieve(state: dict[str, Any], env: Env) -> StepGen:
    """Retrieve for the question, then for each new CoT sentence (the last one that is not a
    reasoning sentence; wh-words removed). The top ``top_k`` paragraphs are added to those
    collected so far, except one longer than 600 words, one already collected, and any once
    ``max_passages`` are collected (the original's ``global_max_num_paras``, 15). The original
    skips a paragraph whose title and text are both at least 90% similar to a collected one
    (rapidfuzz); noterag skips the same passage (same id, or same title and text)."""
    question, cot = state["question"], state.get("cot") or []
    if not cot:  # the first step: an unknown task fails before any search
        env.prompts.answer_for(state.get("task") or env.ctx.task)
    query = retrieval_query(question, cot)
    collected: list[Passage] = list(state.get("passages") or [])
    new: list[Passage] = []
    if query.strip():  # a reasoning sentence's wh-words alone leave nothing to search
        found: list[Passage] = yield Search(query, env.ctx.top_k)
        cap = env.ctx.max_passages
        for passage in found:
            if len(passage["text"].split(" ")) > LONG_PARAGRAPH_WORDS:
                continue
            if any(_same(passage, p) for p in collected):
                continue
            if cap is not None and len(collected) >= cap:
                continue
            collected.append(passage)
            new.append(passage)
    env.emit(
        {
            "type": "passages",
            "step": len(cot),
            "queries": [query],
            "passages": [{"id": p["id"], "title": p["title"]} for p in new],
        }
    )
    return {
        "passages": collected,
        "passage_ids": [p["id"] for p in new],
        "query": query,
        "new_passage_ids": [p["id"] for p in new],
    }


def _same(a: Passage, b: Passage) -> bool:
    return a["id"] == b["id"] or (a["title"] == b["title"] and a["text"] == b["text"])


def reason(state: dict[str, Any], env: Env) -> StepGen:
    """The CoT reasoner writes the next sentence from the demonstrations, every paragraph
    collected so far and the chain of thought so far; only the reply's first sentence is kept.
    A sentence with "answer is" concludes (the exit controller's regex: "... answer is:? X").
    An empty reply adds an empty sentence and ends the loop, as in the original."""
    cot = list(state.get("cot") or [])
    prompt = fitted(
        env.prompts.reason,
        _demonstrations(env),
        env.ctx.prompt_tokens,
        passages=_paragraphs(state.get("passages") or []),
        question=state["question"],
        cot=" ".join(cot),
    ).strip()
    reply = yield Ask("reason", prompt, options={"stop": STOP})
    sentence = first_sentence(reply)
    if not sentence:
        fell_back("cot_sentence")
    answer = concluded_answer(sentence) if sentence else None
    step = len(cot)
    concluded = answer is not None
    env.emit({"type": "thought", "step": step, "sentence": sentence, "concluded": concluded})
    return {
        "cot": [*cot, sentence],
        "steps": step + 1,
        "concluded": answer,
        "trace": [
            {
                "step": step,
                "query": state.get("query"),
                "new_passage_ids": list(state.get("new_passage_ids") or []),
                "sentence": sentence,
                "concluded": concluded,
                "llm_calls": 1,
            }
        ],
    }


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """The answer: what the concluding sentence says follows "answer is". A loop that did not
    conclude (max_steps, or an empty sentence) is answered as the original's IRCoT QA answers
    every question: its reader (the CoT QA prompt over every collected paragraph; the answer
    after "answer is" in its reply). With ``qa_reader`` the reader answers every question,
    concluded or not, as in the paper's IRCoT QA. The reader's call is the one whose tokens
    stream to ``stream_mode="messages"``; a concluded answer is sent as the node's message."""
    task = state.get("task") or env.ctx.task
    reader = env.prompts.answer_for(task)
    concluded: str | None = state.get("concluded")
    if concluded is not None and not env.ctx.qa_reader:
        text, message, trace = concluded.strip(), None, []
    else:
        passages = state.get("passages") or []
        context = _paragraphs(passages)
        prompt = fitted(
            reader,
            _demonstrations(env),
            env.ctx.prompt_tokens,
            passages=f"\n\n{context}" if context else "",
            question=state["question"],
        )
        message = yield Ask("answer", prompt.rstrip(), stream=True, options={"stop": STOP})
        reply = reply_text(message).strip()
        text = reader_answer(reply).strip()
        trace = [
            {
                "step": state.get("steps", 0),
                "reader": True,
                "passage_ids": [p["id"] for p in passages],
                "reply": reply,
                "llm_calls": 1,
            }
        ]
    env.emit({"type": "answer", "answer": text})
    return {
        "answer": text,
        "question": state["question"],
        # the streamed reply's id: the messages stream, which carried its tokens, skips it
        "messages": [AIMessage(text, id=message.id) if message is not None else AIMessage(text)],
        "trace": trace,
    }
