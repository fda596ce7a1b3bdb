"""Iter-RetGen's steps (Shao et al., 2023): generate (iterations 1 .. T-1) and answer (iteration
T, whose generation is the answer). Retrieval is the shared step, given the query the previous
generation made (``queries``).

Model stages: ``generate`` and ``answer``, one role ``generator``. The paper names no stop
sequence (its generations run over several lines: reasoning, then "So the answer is X"), so
none is passed.

Parse fallbacks (counted in the state's ``fallbacks``, noterag.core.parsing.fell_back):

| kind      | a reply without ...                      | fallback                              |
|-----------|------------------------------------------|---------------------------------------|
| answer_is | "answer is" (the last generation)        | its last non-empty line               |

Only the last generation is parsed: the earlier ones go into the next query whole.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import AIMessage

from noterag.core.parsing import fell_back
from noterag.core.step import Ask, Env, StepGen, reply_text

# "So the answer is X" (the demonstrations), "the answer is: X" (models often add the colon)
_ANSWER_IS = re.compile(r"answer is\s*:?", re.IGNORECASE)


def parse_answer(generation: str) -> str:
    """The answer of a generation: what follows its last "answer is" on that line, without
    surrounding quotes, emphasis or a final full stop; without one, the last non-empty line
    (counted as ``answer_is``); "" for an empty generation."""
    lines = [line.strip() for line in generation.splitlines() if line.strip()]
    for line in reversed(lines):
        if markers := list(_ANSWER_IS.finditer(line)):
            answer = line[markers[-1].end() :]
            break
    else:
        fell_back("answer_is")
        answer = lines[-1] if lines else ""
    return answer.strip().strip("*\"'“”").strip().removesuffix(".").strip()


def _prompt(state: dict[str, Any], env: Env) -> str:
    task = state.get("task") or env.ctx.task
    prompt = env.prompts.answer_for(task)
    dataset = "strategyqa" if task == "strategyqa" else env.ctx.demos
    values = {
        "demonstrations": env.prompts.demonstrations[dataset].text,
        "knowledge": env.profile.format_passages(state.get("passages") or []),
        "question": state["question"],
    }
    return prompt.format(**{slot: values[slot] for slot in prompt.slots})


def _entry(state: dict[str, Any], generation: str, answer: str | None = None) -> dict[str, Any]:
    queries = state.get("queries")
    return {
        "step": state.get("steps", 0),
        "query": queries[0] if queries else state["question"],
        "passage_ids": [p["id"] for p in state.get("passages") or []],
        "generation": generation,
        "answer": answer,
        "llm_calls": 1,
    }


def next_query(question: str, generation: str) -> str:
    """Generation-augmented retrieval: the next query is the question and the previous
    generation, whole (the paper: their concatenation; FlashRAG: ``f"{q} {r}"``)."""
    return f"{question} {generation}".strip()


def generate(state: dict[str, Any], env: Env) -> StepGen:
    """Iteration t < T: retrieval-augmented chain of thought over this iteration's paragraphs
    only (the paper processes each iteration's retrieved knowledge as a whole; nothing is
    carried over but the generation itself, in the next query)."""
    generation = (yield Ask("generate", _prompt(state, env))).strip()
    step = state.get("steps", 0)
    env.emit({"type": "generation", "step": step, "generation": generation})
    return {
        "generations": [generation],
        "steps": step + 1,
        "queries": [next_query(state["question"], generation)],
        "trace": [_entry(state, generation)],
    }


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """Iteration T: the same generation, whose answer ("So the answer is X") is the run's. Its
    tokens stream to ``stream_mode="messages"``; the message in state holds the answer."""
    message = yield Ask("answer", _prompt(state, env), stream=True)
    generation = reply_text(message).strip()
    text = parse_answer(generation) if env.prompts.answer_line else generation
    env.emit({"type": "answer", "answer": text, "step": state.get("steps", 0)})
    return {
        "answer": text,
        "question": state["question"],
        "generations": [generation],
        "steps": state.get("steps", 0) + 1,
        # the streamed reply's id: the messages stream, which carried its tokens, skips it
        "messages": [AIMessage(text, id=message.id)],
        "trace": [_entry(state, generation, text)],
    }
